"""RULER's task text, verbatim (NVIDIA/RULER at c3f5e3b, `scripts/data/synthetic/constants.py` `TASKS`;
the task configurations of `scripts/synthetic.yaml`; the needle and noise strings of
`scripts/data/synthetic/niah.py` and `variable_tracking.py`, module level). A prompt is RULER's `base`
model template: the task template followed by its answer prefix (`scripts/data/prepare.py` `main`), so
the model continues the answer prefix. tests/test_ruler.py checks generated prompts against these.
"""

from __future__ import annotations

from dataclasses import dataclass

# scripts/data/synthetic/constants.py, TASKS[...]["template"] / ["answer_prefix"] / ["tokens_to_generate"]
NIAH_TEMPLATE = ("Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
                 "I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic "
                 "{type_needle_v} for {query} mentioned in the provided text?")
NIAH_ANSWER_PREFIX = " The special magic {type_needle_v} for {query} mentioned in the provided text are"
VT_TEMPLATE = ("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
               "Question: Find all variables that are assigned the value {query} in the text above.")
VT_ANSWER_PREFIX = (" Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables "
                    "are assigned the value {query}, they are: ")
CWE_TEMPLATE = ("Below is a numbered list of words. In these words, some appear more often than others. Memorize the "
                "ones that appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?")
CWE_ANSWER_PREFIX = " Answer: The top 10 words that appear most often in the list are:"
FWE_TEMPLATE = ("Read the following coded text and track the frequency of each coded word. Find the three most "
                "frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore "
                "the dots '....'. What are the three most frequently appeared words in the above coded text?")
FWE_ANSWER_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"
TOKENS_TO_GENERATE = {"niah": 128, "vt": 30, "cwe": 120, "fwe": 50}

# niah.py and variable_tracking.py, module level
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."


def singular(template: str) -> str:
    """niah.py `generate_input_output`: one queried value (num_needle_q * num_needle_v == 1) turns the
    template (with its answer prefix) singular by these four replaces, in this order."""
    return template.replace("Some", "A").replace("are all", "is").replace("are", "is").replace("answers", "answer")


@dataclass(frozen=True)
class Niah:
    """One NIAH configuration of scripts/synthetic.yaml (its `args`)."""
    haystack: str  # essay (here: the user's text) / noise / needle
    type_k: str  # words / numbers / uuids
    type_v: str  # numbers / uuids (the plural, as the needle always writes it)
    num_k: int = 1
    num_v: int = 1
    num_q: int = 1


@dataclass(frozen=True)
class Task:
    name: str  # ropecli's name (--task)
    ruler: str  # RULER's name in scripts/synthetic.yaml
    kind: str  # niah / vt / cwe / fwe
    niah: Niah | None = None
    has_needle: bool = True  # a needle to remove: the answer-likelihood gain's control prompt exists

    @property
    def tokens_to_generate(self) -> int:
        return TOKENS_TO_GENERATE[self.kind]


# RULER's 13 tasks less its two QA tasks (SQuAD and HotpotQA: network data). "essay" haystacks read the
# user's text (the built-in plays by default) where RULER reads Paul Graham's essays.
TASKS = {t.name: t for t in (
    Task("niah-single-noise", "niah_single_1", "niah", Niah("noise", "words", "numbers")),
    Task("niah-single", "niah_single_2", "niah", Niah("essay", "words", "numbers")),
    Task("niah-single-uuid", "niah_single_3", "niah", Niah("essay", "words", "uuids")),
    Task("niah-multikey", "niah_multikey_1", "niah", Niah("essay", "words", "numbers", num_k=4)),
    Task("niah-multikey-needle", "niah_multikey_2", "niah", Niah("needle", "words", "numbers")),
    Task("niah-multikey-uuid", "niah_multikey_3", "niah", Niah("needle", "uuids", "uuids")),
    Task("niah-multivalue", "niah_multivalue", "niah", Niah("essay", "words", "numbers", num_v=4)),
    Task("niah-multiquery", "niah_multiquery", "niah", Niah("essay", "words", "numbers", num_q=4)),
    Task("vt", "vt", "vt"),  # num_chains 1, num_hops 4, noise haystack
    Task("cwe", "cwe", "cwe", has_needle=False),  # freq_cw 30, freq_ucw 3, num_cw 10
    Task("fwe", "fwe", "fwe", has_needle=False),  # alpha 2.0
)}
VT_HOPS, VT_CHAINS = 4, 1
CWE_FREQ_CW, CWE_FREQ_UCW, CWE_NUM_CW = 30, 3, 10
FWE_ALPHA, FWE_WORDLEN = 2.0, 6
# niah.py DEPTHS: the depths (percent) RULER draws each needle's place from
DEPTHS = [0, 3, 5, 8, 10, 13, 15, 18, 21, 23, 26, 28, 31, 33, 36, 38, 41, 44, 46, 49, 51, 54, 56, 59, 62, 64, 67, 69, 72,
          74, 77, 79, 82, 85, 87, 90, 92, 95, 97, 100]
