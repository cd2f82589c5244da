"""Document loading and the deterministic window sampling policy."""

import json
import sys
import types

import numpy as np
import pytest
from transformers import AutoTokenizer

from ropecli.errors import RopeCliError
from ropecli.evaluation.corpus import HELD_OUT, all_plays, held_out_plays, training_plays
from ropecli.evaluation.data import Document, load_documents, sample_windows, stratified_order, tokenize_documents
from ropecli.models.config import BUILTIN_DIR

from tiny_models import char_tokenizer


def test_held_out_plays_are_disjoint_from_training():
    assert len(all_plays()) == 38
    assert set(held_out_plays()) == set(HELD_OUT)
    assert not set(training_plays()) & set(HELD_OUT)
    assert len(training_plays()) == 33


def test_tokenized_documents_are_each_tokenizers_own_and_memoized():
    """The memo (one tokenization of the same texts per tokenizer and process) returns what the tokenizer gives:
    a second tokenizer of other ids gets its own, a tokenizer changed in place (an added token) is tokenized anew, and
    a caller changing its list changes nothing for the next."""
    docs = [Document("a", "To be, or not to be: that is the question."), Document("b", "Words, words, words.")]
    tok, chars = AutoTokenizer.from_pretrained(str(BUILTIN_DIR)), char_tokenizer()  # tok is changed below: its own
    own = [tok(d.text, add_special_tokens=False)["input_ids"] for d in docs]
    first = tokenize_documents(docs, tok)
    assert first == own and tokenize_documents(docs, tok) == own
    first.pop()  # the caller's list
    assert tokenize_documents(docs, tok) == own
    assert tokenize_documents(docs, chars) == [chars(d.text, add_special_tokens=False)["input_ids"] for d in docs] != own
    tok.add_tokens(["question"])
    assert tokenize_documents(docs, tok) == [tok(d.text, add_special_tokens=False)["input_ids"] for d in docs] != own


def test_sources(tmp_path):
    (tmp_path / "a.txt").write_text("alpha text")
    (tmp_path / "b.jsonl").write_text(json.dumps({"body": "beta"}) + "\n\n" + json.dumps({"body": "gamma"}) + "\n")
    docs, label = load_documents([str(tmp_path)], text_field="body")
    assert [d.name for d in docs] == ["a.txt", "b.jsonl:1", "b.jsonl:3"]
    with pytest.raises(RopeCliError, match="'text' field"):
        load_documents([str(tmp_path / "b.jsonl")])
    with pytest.raises(RopeCliError, match="no such file"):
        load_documents([str(tmp_path / "missing.txt")])
    docs, label = load_documents(None)
    assert "held-out Shakespeare" in label and len(docs) == 5


def test_json_files_are_documents_not_prose(tmp_path):
    (tmp_path / "list.json").write_text(json.dumps(["first text", "second text"]))
    (tmp_path / "records.json").write_text(json.dumps([{"body": "third"}, {"body": "fourth"}]))
    (tmp_path / "one.json").write_text(json.dumps({"text": "fifth"}))
    docs, _ = load_documents([str(tmp_path / "list.json"), str(tmp_path / "one.json")])
    assert [(d.name, d.text) for d in docs] == [("list.json:0", "first text"), ("list.json:1", "second text"),
                                                ("one.json:0", "fifth")]
    docs, _ = load_documents([str(tmp_path / "records.json")], text_field="body")
    assert [d.text for d in docs] == ["third", "fourth"]  # the texts, not the JSON syntax around them
    with pytest.raises(RopeCliError, match="item 0 is neither a string nor an object with a 'text'"):
        load_documents([str(tmp_path / "records.json")])
    (tmp_path / "bad.json").write_text("[1, 2")
    with pytest.raises(RopeCliError, match="is not valid JSON"):
        load_documents([str(tmp_path / "bad.json")])


def test_hf_datasets_source(monkeypatch):
    class FakeDataset(list):
        column_names = ["text", "meta"]

    calls = {}

    def load_dataset(name, config, split):
        calls.update(name=name, config=config, split=split)
        return FakeDataset([{"text": "one book"}, {"text": "another book"}])

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    docs, _ = load_documents(["hf:pg19::test"])
    assert calls == {"name": "pg19", "config": None, "split": "test"}
    assert [d.text for d in docs] == ["one book", "another book"]


def fake_docs():
    docs = [Document(f"d{i}", "") for i in range(4)]
    tokens = [list(range(100 * i, 100 * i + n)) for i, n in enumerate([50, 30, 10, 25])]
    return docs, tokens


def test_windows_are_deterministic_and_round_robin():
    docs, tokens = fake_docs()
    w = sample_windows(docs, tokens, 11, 5, seed=3, lead=[-1])
    assert w.ids.shape == (5, 11) and (w.ids[:, 0] == -1).all()
    assert w.skipped == 0
    firsts = w.names[:4]
    assert sorted(firsts) == ["d0", "d1", "d2", "d3"]  # every document's head before any second window
    for name, row in zip(w.names, w.ids):
        i = int(name[1:])
        assert row[1] % 10 == 0 and 100 * i <= row[1] < 100 * i + 50  # windows start on window boundaries
    again = sample_windows(docs, tokens, 11, 5, seed=3, lead=[-1])
    assert np.array_equal(w.ids, again.ids) and w.fingerprint == again.fingerprint
    other = sample_windows(docs, tokens, 11, 5, seed=4, lead=[-1])
    assert other.fingerprint != w.fingerprint or other.names != w.names


def test_short_documents_are_skipped_and_too_little_text_is_an_error():
    docs, tokens = fake_docs()
    w = sample_windows(docs, tokens, 26, 2, seed=0, lead=[])
    assert w.skipped == 2 and set(w.names) <= {"d0", "d1"}
    with pytest.raises(RopeCliError, match="too little text"):
        sample_windows(docs, tokens, 26, 3, seed=0, lead=[])


def test_the_stratified_order_is_the_one_every_cached_window_was_drawn_in():
    """The order (and so every sampled window, cache entry and published number) is the one drawn since the order was
    introduced: the same coins and offsets from the same generator, whatever the code that draws them."""
    assert stratified_order(10, np.random.default_rng(0)) == [8, 1, 7, 4, 2, 5, 3, 9, 0, 6]
    rng = np.random.default_rng([1, 2])
    assert stratified_order(37, rng)[:12] == [23, 0, 35, 17, 18, 8, 31, 13, 26, 2, 34, 15]
    assert rng.random() == pytest.approx(0.425825, abs=1e-6)  # and the generator left where it was left before
