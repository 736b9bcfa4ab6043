"""``posenc translate`` and ``posenc generate``: text in, text out on the command line.

`add_commands` adds both to ``posenc``'s parser (keras_posenc/cli.py builds it and runs
them with its conventions: errors as one line, Keras imported after the arguments are
checked). ``generate`` runs any zoo model that holds a tokenizer (T5: the text is the
source; DecoderLM: the text is the prompt) from a ``.keras`` file, a keras-hub preset folder
(converted offline by `keras_posenc.convert.from_keras_hub_preset`) or a keras-hub preset
handle; ``translate`` runs fairseq ConvS2S translation presets (keras_posenc/hub) and hands
a keras-hub preset (a T5 folder, a handle such as ``t5_small_multi``) to ``generate``'s
loading, with beam search. Like cli.py, this module imports neither Keras nor keras-hub at
import time, so ``posenc --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from typing import Any

from keras_posenc._sources import hub_cache, hub_offline, is_url, reachable

# keras-hub's preset handles (keras_hub/src/utils/preset_utils.py's prefixes); a bare name
# such as "t5_small_multi" is a handle too when keras-hub lists it. `posenc translate` reads
# hf:// as keras-posenc's hub (timm checkpoints, keras_posenc/hub/presets.py), not keras-hub's.
HANDLE_PREFIXES = ("kaggle://", "hf://", "gs://", "modelscope://")
KERAS_HUB_ONLY = tuple(prefix for prefix in HANDLE_PREFIXES if prefix != "hf://")
# keras-hub's defaults for its samplers (keras_hub.samplers.TopKSampler, TopPSampler).
DEFAULT_K, DEFAULT_P = 5, 0.1
# Tokens a language model may add after its longest prompt when --max-length is not given.
LANGUAGE_MODEL_ROOM = 64

GENERATE_DESCRIPTION = (
    "Generate text with a zoo model that holds a tokenizer: T5 (an encoder-decoder; each "
    "TEXT is a source, e.g. 'translate English to German: ...') or DecoderLM (a language "
    "model; each TEXT is a prompt, and its output starts with the prompt, as keras-hub's "
    "generate). SOURCE is a .keras file of such a model, a keras-hub preset folder (written "
    "by save_to_preset; converted offline with its tokenizer) or a keras-hub preset handle "
    "(e.g. t5_small_multi, kaggle://..., hf://...; downloaded by keras-hub). Greedy search "
    "by default; --beam N for beam search, --sample for sampling. Prints one output per line, "
    "in the order of the inputs; with --n-best N, the N best outputs of each input, best "
    "first, on N consecutive lines (N lines per input). A line break inside an output is "
    "printed as \\n."
)


def add_commands(commands: Any, measured: str | None = None) -> None:
    """Adds ``translate`` and ``generate`` to ``posenc``'s subcommands (``commands``, the
    action of ``add_subparsers``); ``measured``: how long ``generate`` took when measured,
    for its --help (None until benchmarks/cli_quick.py measured it)."""
    translate = commands.add_parser(
        "translate",
        help="translate sentences with a fairseq ConvS2S archive (URL or file) or a preset",
        description="Translate sentences with a translation preset: a fairseq fconv archive's "
        "URL (e.g. https://dl.fbaipublicfiles.com/fairseq/models/wmt14.v2.en-fr.fconv-py"
        ".tar.bz2), which is downloaded and converted on first use and then read from the "
        "cache (KERAS_POSENC_HOME), the archive file, or a preset folder. Sentences go "
        "through fairseq's pipeline (Moses tokenisation, BPE, dictionaries) and beam "
        "search; one translation is printed per line, in order. A keras-hub T5 preset (a "
        "folder written by save_to_preset, or a handle such as t5_small_multi) is run as "
        "`posenc generate --beam B` runs it: give each sentence with its task prefix "
        "('translate English to German: ...').",
    )
    translate.add_argument("texts", nargs="*", metavar="TEXT", help="sentences to translate")
    translate.add_argument(
        "--model",
        required=True,
        metavar="SOURCE",
        help="a fairseq archive's URL or file, or a preset folder (a URL downloads on first "
        "use), or a keras-hub T5 preset folder or handle",
    )
    translate.add_argument("--file", help="a text file of sentences, one per line")
    translate.add_argument("--beam", type=int, default=5, help="beam size (default: 5)")
    translate.add_argument(
        "--max-length", type=int, help="the most target tokens (default: min(200, the model's))"
    )
    translate.add_argument(
        "--batch-size", type=int, default=32, help="sentences per batch (default: 32)"
    )
    translate.add_argument(
        "--quiet", action="store_true", help="no download or conversion progress"
    )
    translate.set_defaults(handler=_translate, precheck=_check_translate)

    description = GENERATE_DESCRIPTION + (f" ({measured})" if measured else "")
    generate = commands.add_parser(
        "generate",
        help="generate text with T5 or a DecoderLM (.keras file, keras-hub preset folder or "
        "handle)",
        description=description,
    )
    generate.add_argument("texts", nargs="*", metavar="TEXT", help="sources or prompts")
    generate.add_argument(
        "--model",
        required=True,
        metavar="SOURCE",
        help="a .keras file, a keras-hub preset folder, or a keras-hub preset handle "
        "(downloads on first use)",
    )
    generate.add_argument("--file", help="a text file of inputs, one per line")
    generate.add_argument(
        "--max-length",
        metavar="N",
        type=int,
        help="T5: the most tokens generated after the decoder's start token (default: twice "
        "the longest source's tokens plus 10, at most the model's max_target_length); a "
        f"language model: the length of the whole sequence, prompt included (default: the "
        f"longest prompt's tokens plus {LANGUAGE_MODEL_ROOM}, at most the model's max_length)",
    )
    generate.add_argument(
        "--beam",
        type=int,
        metavar="N",
        help="beam search with this many beams (default: greedy search)",
    )
    generate.add_argument(
        "--n-best",
        metavar="N",
        type=int,
        help="print the N best outputs of each input (beam search, --beam N by default)",
    )
    generate.add_argument(
        "--length-penalty",
        metavar="A",
        type=float,
        help="beam search's length penalty (default: 1.0); not with --sample",
    )
    generate.add_argument(
        "--sample",
        choices=("random", "top_k", "top_p"),
        help="sample each token with keras-hub's sampler of this name (random: from the whole "
        "distribution; top_k: from the K most likely; top_p: from the most likely whose "
        "probabilities add up to P)",
    )
    generate.add_argument(
        "--top-k",
        type=int,
        metavar="K",
        help=f"top_k's K (default: {DEFAULT_K}); with top_p, the K most likely tokens it "
        "chooses among (default: all)",
    )
    generate.add_argument(
        "--top-p", type=float, metavar="P", help=f"top_p's P, in (0, 1] (default: {DEFAULT_P})"
    )
    generate.add_argument(
        "--temperature",
        metavar="T",
        type=float,
        help="the sampler's temperature, > 0 (default: 1.0)",
    )
    generate.add_argument(
        "--seed", type=int, metavar="S", help="the sampler's seed (each batch starts from it)"
    )
    generate.add_argument(
        "--batch-size", type=int, default=32, metavar="B", help="inputs per batch (default: 32)"
    )
    generate.set_defaults(handler=_generate, precheck=_check_generate)


# --------------------------------------------------------------------------- checks


def read_texts(args: argparse.Namespace, what: str) -> list[str]:
    """The TEXT arguments, then the lines of ``--file``; raises if there are none."""
    texts = list(args.texts)
    if args.file is not None:
        with open(args.file, encoding="utf-8") as handle:
            texts += handle.read().splitlines()
    if not texts:
        raise ValueError(f"nothing to {what}: give texts or --file.")
    return texts


def generation_options(args: argparse.Namespace) -> dict:
    """``model.generate``'s options from ``posenc generate``'s arguments, the sampler as
    ``(name, settings)``; raises for values out of range or options that do not go together,
    before Keras is imported.

    Examples:

        >>> from keras_posenc.cli import build_parser
        >>> def options(*argv):
        ...     return generation_options(build_parser().parse_args(["generate", *argv]))
        >>> options("--model", "lm.keras", "Hi", "--n-best", "2")
        {'beam_size': 2, 'return_n_best': 2, 'sampler': None, 'length_penalty': 1.0}
        >>> options("--model", "lm.keras", "Hi", "--sample", "top_p", "--top-p", "0.9")["sampler"]
        ('top_p', {'temperature': 1.0, 'p': 0.9, 'k': None})
        >>> options("--model", "lm.keras", "Hi", "--top-k", "4")
        Traceback (most recent call last):
        ValueError: --top-k: for sampling only; add --sample.
    """
    for name in ("beam", "n_best", "batch_size", "max_length", "top_k"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}.")
    beam = args.beam or args.n_best or 1
    if args.n_best is not None and args.n_best > beam:
        raise ValueError(f"--n-best {args.n_best} needs --beam of at least {args.n_best}.")
    sampling = {"--top-k": args.top_k, "--top-p": args.top_p, "--temperature": args.temperature}
    given = [name for name, value in sampling.items() if value is not None]
    if args.sample is None:
        if given or args.seed is not None:
            extra = given + (["--seed"] if args.seed is not None else [])
            raise ValueError(f"{', '.join(extra)}: for sampling only; add --sample.")
        penalty = 1.0 if args.length_penalty is None else args.length_penalty
        return {"beam_size": beam, "return_n_best": args.n_best, "sampler": None,
                "length_penalty": penalty}  # fmt: skip
    if args.length_penalty is not None:
        raise ValueError("--length-penalty applies to beam search, not --sample.")
    if beam > 1:
        raise ValueError("--sample cannot be combined with --beam or --n-best (beam search does "
                         "not sample).")  # fmt: skip
    if args.top_p is not None and args.sample != "top_p":
        raise ValueError(f"--top-p applies to --sample top_p, not {args.sample}.")
    if args.top_k is not None and args.sample == "random":
        raise ValueError("--top-k applies to --sample top_k or top_p, not random.")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise ValueError(f"--top-p must be in (0, 1], got {args.top_p}.")
    if args.temperature is not None and not args.temperature > 0:
        raise ValueError(f"--temperature must be above 0, got {args.temperature}.")
    if args.seed is not None and args.seed < 0:
        raise ValueError(f"--seed must be at least 0, got {args.seed}.")
    settings = {"temperature": 1.0 if args.temperature is None else args.temperature}
    if args.sample == "top_k":
        settings["k"] = DEFAULT_K if args.top_k is None else args.top_k
    elif args.sample == "top_p":
        settings["p"] = DEFAULT_P if args.top_p is None else args.top_p
        settings["k"] = args.top_k
    return {"beam_size": 1, "return_n_best": None, "sampler": (args.sample, settings),
            "seed": args.seed}  # fmt: skip


def keras_hub_backbone(folder: str) -> str | None:
    """The class of a keras-hub preset folder's backbone (``"T5Backbone"``), or None for a
    folder that is not one (its ``config.json`` missing or not keras-hub's).

    >>> keras_hub_backbone("no/such/folder") is None
    True
    """
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError):
        return None
    name = config.get("registered_name", "") if isinstance(config, dict) else ""
    return name.split(">", 1)[1] if name.startswith("keras_hub>") else None


def source_failure(source: str) -> str | None:
    """The one-line error of a keras-hub ``hf://`` handle that is not in huggingface_hub's
    cache while the hub cannot be reached (or ``HF_HUB_OFFLINE`` is set); None otherwise.
    Checked before Keras is imported: keras-hub would retry for half a minute, printing
    a line per try. Other handles fail within a second (keras-hub's Kaggle client)."""
    if not source.startswith("hf://"):
        return None
    repo = source[len("hf://") :].strip("/")
    if os.path.isdir(os.path.join(hub_cache(), "models--" + repo.replace("/", "--"))):
        return None
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    if hub_offline():
        reason = "HF_HUB_OFFLINE is set"
    else:
        unreachable = reachable(endpoint)
        if not unreachable:
            return None
        reason = f"the hub ({endpoint}) cannot be reached: {unreachable}"
    return (
        f"the keras-hub preset {source} is not in huggingface_hub's cache ({hub_cache()}) "
        f"and {reason}. Run once with network access, or pass a preset folder written by "
        "save_to_preset."
    )


def is_keras_hub_source(source: str) -> bool:
    """Whether ``posenc translate``'s SOURCE is a keras-hub preset: a folder of one, a
    ``kaggle://``-style handle, or a name keras-hub lists (imports keras-hub for that)."""
    if os.path.isdir(source):
        return keras_hub_backbone(source) is not None
    if source.startswith(KERAS_HUB_ONLY):
        return True
    if os.path.exists(source) or is_url(source) or source.startswith("hf://"):
        return False
    from keras_posenc._quiet import quiet_import

    return source in quiet_import("keras_hub").models.Backbone.presets


# --------------------------------------------------------------------------- running


def load_text_model(source: str) -> Any:
    """The generating zoo model of ``source`` (the module docstring), after checking that
    it has a tokenizer."""
    from keras_posenc.zoo.seq2seq import GeneratingModel

    if source.endswith(".keras"):
        from keras_posenc.zoo.registry import load_keras_file

        model = load_keras_file(source)
    else:
        if os.path.isdir(source) and keras_hub_backbone(source) is None:
            raise ValueError(
                f"{source!r} is not a keras-hub preset folder (its config.json is missing or "
                "not keras-hub's); a keras-posenc translation preset runs with "
                "`posenc translate --model`."
            )
        if not os.path.isdir(source) and (os.sep in source or source.startswith(".")):
            if not source.startswith(HANDLE_PREFIXES):
                raise FileNotFoundError(f"--model: no such folder: {source!r}.")
        from keras_posenc.convert import from_keras_hub_preset

        model = from_keras_hub_preset(source)
    if not isinstance(model, GeneratingModel):
        raise TypeError(
            f"{source!r} holds a {type(model).__name__}, which does not generate text; "
            "posenc generate runs T5 and DecoderLM models with a tokenizer."
        )
    if getattr(model, "tokenizer", None) is None:
        raise ValueError(
            f"{source!r} holds a {type(model).__name__} without a tokenizer: it generates "
            "token ids, not text. Give the model a tokenizer (tokenizer='byte', or a keras-hub "
            "tokenizer) before saving it, or use a preset folder that has one."
        )
    return model


def default_max_length(model: Any, texts: list[str]) -> int:
    """``--max-length``'s default for ``texts`` (its --help), the same for every batch;
    tokenizing the texts also raises for one too long for the model."""
    longest = model.encode_texts(texts, "generate").shape[1]
    if getattr(model, "is_decoder_only", False):
        wanted, limit = longest + LANGUAGE_MODEL_ROOM, model.max_length
    else:
        wanted, limit = 2 * longest + 10, model.max_target_length
    return wanted if limit is None else min(wanted, limit)


def _sampler(choice: tuple | None) -> Any:
    if choice is None:
        return None
    from keras_posenc._quiet import quiet_import

    samplers = quiet_import("keras_hub").samplers
    name, settings = choice
    kind = {"random": "RandomSampler", "top_k": "TopKSampler", "top_p": "TopPSampler"}[name]
    return getattr(samplers, kind)(**settings)


def generated_lines(
    model: Any, texts: list[str], options: dict, max_length: int | None, batch_size: int
) -> Iterator[str]:
    """The printed lines: each input's output (its n-best list, best first), line breaks
    inside an output written as ``\\n``."""
    options = dict(options, sampler=_sampler(options["sampler"]))
    if max_length is None:
        max_length = default_max_length(model, texts)
    for start in range(0, len(texts), batch_size):
        outputs = model.generate(texts[start : start + batch_size], max_length=max_length,
                                 **options)  # fmt: skip
        for output in outputs:
            for text in output if isinstance(output, list) else [output]:
                yield text.replace("\r", "\\r").replace("\n", "\\n")


def _check_generate(args: argparse.Namespace) -> None:
    """``posenc generate``'s checks before Keras is imported (cli.main runs ``precheck``
    first): its options, its texts, the ``.keras`` file."""
    args.options = generation_options(args)
    args.inputs = read_texts(args, "generate from")
    if args.model.endswith(".keras") and not os.path.isfile(args.model):
        raise FileNotFoundError(f"--model: no such file: {args.model!r}.")


def _generate(args: argparse.Namespace) -> int:
    model = load_text_model(args.model)
    lines = generated_lines(model, args.inputs, args.options, args.max_length, args.batch_size)
    for line in lines:
        print(line, flush=True)
    return 0


def _check_translate(args: argparse.Namespace) -> None:
    """``posenc translate``'s checks before Keras is imported or anything downloads."""
    if args.beam < 1 or args.batch_size < 1:
        raise ValueError(
            f"--beam and --batch-size must be at least 1, got {args.beam} and {args.batch_size}."
        )
    args.inputs = read_texts(args, "translate")


def _translate(args: argparse.Namespace) -> int:
    texts = args.inputs
    if is_keras_hub_source(args.model):
        model = load_text_model(args.model)
        if getattr(model, "is_decoder_only", False):
            raise ValueError(
                f"{args.model!r} is a language model ({type(model).__name__}), which continues "
                f"prompts: use `posenc generate --model {args.model}`."
            )
        options = {"beam_size": args.beam, "return_n_best": None, "sampler": None}
        for line in generated_lines(model, texts, options, args.max_length, args.batch_size):
            print(line, flush=True)
        return 0
    from keras_posenc.hub import load_preset

    preset = load_preset(args.model, progress=not args.quiet)
    for translation in preset.translate(
        texts, beam_size=args.beam, max_length=args.max_length, batch_size=args.batch_size
    ):
        print(translation)
    return 0
