"""Task prompts as a chat model is served them: `--chat-template none|auto|FILE` (torch-free).

Every task prompt ropecli builds (passkey, passkey-text, RULER's tasks) is a question the model is asked and an answer
prefix it continues ("What is the pass key?" / "The pass key is"), then the scored answer (" 4711"). A `PromptFrame`
turns the two into the tokens the model reads:

    none (the default: the raw form the tasks' authors publish, today's prompts)
        LEAD question SEP prefix           SEP = " " where neither side has whitespace at the join, else ""
                                           LEAD: what --bos puts before a text (`ropecli.evaluation.bos_policy`; auto:
                                           the tokenizer's own, as lm-eval and RULER tokenize)
    a chat template (auto: the model's own, the tokenizer's or the GGUF's `tokenizer.chat_template`; FILE: a Jinja file)
        render([{"role": "user", "content": question}, {"role": "assistant", "content": prefix}],
               continue_final_message=True)      tokenized with no special tokens added (the template writes its BOS),
                                                 then --bos: auto adds the tokenizer's own lead unless the rendering
                                                 starts with BOS (lm-eval's rule)

The chat form is what lm-evaluation-harness builds with --apply_chat_template for a task with a `gen_prefix`
(lm_eval 0.4.13 `api/task.py:ConfigurableTask.fewshot_context` → `build_qa_turn` makes the user turn and an assistant
turn holding the prefix; `models/huggingface.py:HFLM.apply_chat_template` renders it with continue_final_message), and
what transformers' `apply_chat_template(..., continue_final_message=True)` returns. The raw join is lm-eval's
`api/utils.py:requires_delimiter`.

The template is rendered once, with sentinels for the two contents, and cut into head / middle: a prompt is then
head + question + middle + prefix (`text`), which is the full rendering wherever the template writes a message's content
as given (tests/test_chat_template.py checks it against apply_chat_template on the templates it tries; a template that
trims or rewrites content is refused in one line rather than approximated).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ropecli.errors import RopeCliError
from ropecli.evaluation.bos_policy import framed, lead_ids

USER, ASSISTANT = "\x00ropecli-question\x00", "\x00ropecli-prefix\x00"
HINT = "pass --chat-template none (the raw prompt), or --chat-template FILE with a Jinja chat template"


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def separator(question: str, prefix: str) -> str:
    """lm-eval's requires_delimiter: a space where neither side has whitespace at the join."""
    return " " if question and prefix and not (question[-1].isspace() or prefix[0].isspace()) else ""


@dataclass(frozen=True)
class PromptFrame:
    """How a question and its answer prefix become the model's tokens: raw (`template` None) or a chat template's
    rendering cut around the two contents (`head` question `middle` prefix)."""
    name: str = "none"  # none / auto / the template file's path
    template: str | None = None
    head: str = ""
    middle: str = ""
    bos: str = "auto"  # --bos: what stands before the text (`ropecli.evaluation.bos_policy`)

    @property
    def chat(self) -> bool:
        return self.template is not None

    def text(self, question: str, prefix: str) -> str:
        """The prompt as text, without the raw form's lead (tokens, added by `ids`)."""
        prefix = prefix.lstrip() if self.chat else prefix  # the assistant's turn starts at its first word
        return self.head + question + self.middle + prefix if self.chat else question + separator(question, prefix) + prefix

    def lead(self, tokenizer) -> list[int]:
        """The tokens before the question: --bos's (raw) or the template's head (with --bos's BOS)."""
        return framed(tokenizer, self.bos, encode(tokenizer, self.head)) if self.chat else lead_ids(tokenizer, self.bos)

    def close(self, question_end: str, prefix: str) -> str:
        """The text after the question's body (its last words `question_end`), through the answer prefix: for prompts
        built token by token (passkey-text), whose body is tokens of the filler."""
        return self.text(question_end, prefix)[len(self.head):] if self.chat else self.text(question_end, prefix)

    def ids(self, tokenizer, question: str, prefix: str) -> list[int]:
        """The whole prompt's tokens (the text tokenized at once, the raw form after its BOS)."""
        return self.ids_of(tokenizer, self.text(question, prefix))

    def ids_of(self, tokenizer, text: str) -> list[int]:
        """The tokens of `text`, a prompt of this frame or its beginning: after --bos's lead where raw."""
        return framed(tokenizer, self.bos, encode(tokenizer, text)) if self.chat else self.lead(tokenizer) + encode(tokenizer, text)

    def to_json(self) -> str:
        return self.name

    def describe(self) -> str:
        return describe_frame(self.name)


RAW = PromptFrame()


def describe_frame(name: str) -> str:
    """A frame's name (its `--json` value) in words, for a caption: "raw (no chat template)", "in the model's own chat
    template", "in the chat template FILE"."""
    if name == "none":
        return "raw (no chat template)"
    return "in the model's own chat template" if name == "auto" else f"in the chat template {name}"


def check_template_file(option: str) -> Path:
    """--chat-template FILE: the file, or one line saying it is not there (also asked before the model loads)."""
    path = Path(option)
    if not path.is_file():
        raise RopeCliError(f"--chat-template {option}: no such file; pass auto (the model's own), none, or the path of "
                           "a Jinja chat template")
    return path


def prompt_frame(option: str | None, tokenizer) -> PromptFrame:
    """--chat-template as a PromptFrame: none (raw), auto (the model's own template) or a Jinja file. A model without a
    template under auto, an unreadable file, or a template that does not write the contents as given: one line."""
    if option in (None, "", "none"):
        return RAW
    if option == "auto":
        template = getattr(tokenizer, "chat_template", None)
        if isinstance(template, dict):  # several named templates: the default one
            template = template.get("default")
        if not template:
            raise RopeCliError(f"--chat-template auto: this model ships no chat template (its tokenizer has none); {HINT}")
        source = "the model's chat template"
    else:
        template, source = check_template_file(option).read_text(encoding="utf-8"), f"the chat template {option}"
    rewrites = RopeCliError(f"--chat-template {option}: {source} does not write a user's and an assistant's message as "
                            f"given (it trims or rewrites them), so its prompts cannot be built around a task's text; {HINT}")
    try:
        rendered = render(tokenizer, template, USER, ASSISTANT, source)
    except RopeCliError as e:
        if "does not appear" in str(e):  # transformers' continue_final_message found no assistant's content to continue
            raise rewrites from e
        raise
    if rendered.count(USER) != 1 or not rendered.endswith(ASSISTANT) or rendered.index(USER) > rendered.index(ASSISTANT):
        raise rewrites
    head, rest = rendered.split(USER)
    return PromptFrame("auto" if option == "auto" else option, template, head, rest[:-len(ASSISTANT)])


def render(tokenizer, template: str, question: str, prefix: str, source: str = "the chat template") -> str:
    """The template's rendering of the user's `question` and the assistant's `prefix`, continued (no end of turn)."""
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": prefix}]
    try:
        return tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False, continue_final_message=True)
    except Exception as e:  # noqa: BLE001 - a Jinja error, a template that raises on these roles: one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RopeCliError(f"--chat-template: {source} fails on a user's and an assistant's message ({first}); {HINT}") from e
