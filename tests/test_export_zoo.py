"""Every registered zoo model, in a small variant, checked for distinct initial weights, and
every family exported on TensorFlow and verified in ONNX, SavedModel and LiteRT, each format on
another of its distinct small models (large: CI runs it on TensorFlow only). A model registered
without a small variant here fails the coverage test, so the list grows with the zoo. Names
whose small variants are one model under two names (they differ only in sizes the variant
overrides) count as one; the weights test checks they are."""

from __future__ import annotations

import itertools
import json
import re

import keras
import pytest
from repository import docs_path

import layer_checks
from keras_posenc import zoo
from keras_posenc.export import (
    FORMATS,
    export_language_model,
    export_model,
    export_names,
    export_seq2seq,
)
from keras_posenc.zoo import language_model
from keras_posenc.zoo.language_model import LanguageModel
from keras_posenc.zoo.seq2seq import Seq2SeqModel, decoding_names, decoding_signatures

pytestmark = pytest.mark.contract

SMALL_COATNET = {
    "blocks": (1, 1, 1, 1, 1),
    "channels": (16, 16, 32, 64, 64),
    "input_shape": (64, 64, 3),
    "num_classes": 10,
}
SMALL_MAXVIT = {
    "blocks": (2, 1, 1, 1, 1),
    "head_dim": 16,
    "channels": (16, 16, 32, 64, 64),
    "input_shape": (64, 64, 3),
    "num_classes": 10,
}
SMALL_CONVS2S = {
    "src_vocab_size": 50,
    "tgt_vocab_size": 60,
    "embed_dim": 32,
    "max_source_positions": 64,
    "max_target_positions": 64,
}
SMALL_MUSE = {
    "src_vocab_size": 50,
    "tgt_vocab_size": 50,
    "hidden_dim": 32,
    "intermediate_dim": 64,
    "num_heads": 4,
    "num_encoder_layers": 2,
    "num_decoder_layers": 2,
}
SMALL_MUSE_ENCODER = {"vocab_size": 50, "hidden_dim": 32, "intermediate_dim": 64, "num_layers": 2}
# Each registered name and the overrides that make it small (about 5M parameters or fewer)
# while keeping its family's structure.
SMALL_VARIANTS = {
    **{f"coatnet_{n}": SMALL_COATNET for n in range(5)},
    **{f"coatnet_{n}_rw{size}": {**SMALL_COATNET, "blocks": (2, 1, 1, 1, 1),
                                  "stem_channels": (8, 16)}
       for n, size in [(n, "_224") for n in ("nano", 0, 1, 2, 3, "bn_0", "rmlp_nano", "rmlp_0",
                                              "rmlp_1", "rmlp_2", "rmlp_3")]
                      + [("rmlp_1", "2_224"), ("rmlp_2", "_384")]},
    **{name: SMALL_MAXVIT for name in ("maxvit_t", "maxvit_s", "maxvit_b", "maxvit_l",
                                       "maxvit_tiny_tf_224", "maxvit_small_tf_224",
                                       "maxvit_base_tf_224", "maxvit_large_tf_224")},
    **{name: {**SMALL_MAXVIT, "stem_channels": (8, 16)}
       for name in ("maxvit_nano_rw_256", "maxvit_tiny_rw_224")},
    **{f"maxvit_{size}_tf_{side}": SMALL_MAXVIT
       for size in ("tiny", "small", "base", "large", "xlarge") for side in (224, 384, 512)
       if f"{size}{side}" not in ("tiny224", "small224", "base224", "large224")},
    **{name: {**SMALL_MAXVIT, "stem_channels": (8, 16)}
       for name in ("maxvit_rmlp_pico_rw_256", "maxvit_rmlp_nano_rw_256",
                    "maxvit_rmlp_tiny_rw_256", "maxvit_rmlp_small_rw_224",
                    "maxvit_rmlp_small_rw_256", "maxvit_rmlp_base_rw_224",
                    "maxvit_rmlp_base_rw_384")},
    # ConvNeXt blocks widen through their depthwise convs: each stage a multiple of the last.
    **{name: {**SMALL_MAXVIT, "stem_channels": (8, 16), "head_dim": 16}
       for name in ("coatnext_nano_rw_224", "maxxvit_rmlp_nano_rw_256",
                    "maxxvit_rmlp_tiny_rw_256", "maxxvit_rmlp_small_rw_256",
                    "maxxvitv2_nano_rw_256", "maxxvitv2_rmlp_base_rw_224",
                    "maxxvitv2_rmlp_base_rw_384", "maxxvitv2_rmlp_large_rw_224")},
    "convs2s_small": {"src_vocab_size": 50, "tgt_vocab_size": 60},
    "convs2s_iwslt_de_en": SMALL_CONVS2S,
    "convs2s_wmt_en_ro": {**SMALL_CONVS2S, "encoder_layers": [(32, 3)] * 3,
                          "decoder_layers": [(32, 3)] * 3, "decoder_out_embed_dim": 32},
    "convs2s_wmt_en_de": {**SMALL_CONVS2S, "encoder_layers": [(32, 3), (64, 3), (128, 1)],
                          "decoder_layers": [(32, 3), (64, 3), (128, 1)],
                          "decoder_out_embed_dim": 32},
    "convs2s_wmt_en_fr": {**SMALL_CONVS2S, "encoder_layers": [(32, 3), (48, 3), (64, 1)],
                          "decoder_layers": [(32, 3), (48, 3), (64, 1)],
                          "decoder_out_embed_dim": 32},
    "convs2s_lm": {"vocab_size": 50, "embed_dim": 16, "decoder_layers": [(32, 4)] * 2,
                   "decoder_out_embed_dim": 16},
    **{name: SMALL_MUSE for name in ("muse_iwslt_de_en", "muse_wmt_large", "muse_small")},
    "muse_tiny": {"src_vocab_size": 50, "tgt_vocab_size": 60},
    **{name: SMALL_MUSE_ENCODER for name in ("muse_encoder_small", "muse_encoder_base")},
    **{name: {"src_vocab_size": 60, "tgt_vocab_size": 60, "hidden_dim": 32,
              "intermediate_dim": 64, "num_heads": 4, "num_encoder_layers": 1,
              "num_decoder_layers": 1}
       for name in ("muse_iwslt_de_en", "muse_wmt_large", "muse_small", "muse_tiny")},
    **{name: {"vocab_size": 50, "hidden_dim": 32, "intermediate_dim": 64, "num_heads": 4,
              "num_layers": 1}
       for name in ("muse_encoder_small", "muse_encoder_base")},
    **{name: {"vocabulary_size": 60, "hidden_dim": 32, "intermediate_dim": 64, "num_heads": 4,
              "key_value_dim": 8, "num_layers": 2}
       for name in ("t5_small", "t5_base", "t5_1.1_small", "t5_1.1_base")},
    **{name: {"vocabulary_size": 60, "hidden_dim": 32, "intermediate_dim": 64, "num_heads": 4,
              "num_layers": 2, "max_distance": 4}
       for name in ("shaw_transformer_base", "shaw_transformer_big")},
    "music_transformer_base": {"num_events": 50, "hidden_dim": 32, "intermediate_dim": 64,
                               "num_heads": 4, "num_layers": 2, "max_distance": 16},
    # The tiny one is small already; the small one with Gemma 2's local and global layers
    # (a rolling cache in the first, a full one in the second).
    "decoder_lm_tiny": {"vocab_size": 50, "tokenizer": None},
    "decoder_lm_small": {"vocab_size": 50, "tokenizer": None, "hidden_dim": 32,
                         "intermediate_dim": 64, "num_heads": 4, "num_key_value_heads": 2,
                         "num_layers": 2, "sliding_window": 4, "global_every": 2},
    **{name: {"vocabulary_size": 60, "hidden_dim": 32, "intermediate_dim": 64, "num_heads": 4,
              "num_layers": 2, "bucket_size": 8, "max_sequence_length": 32}
       for name in ("deberta_v3_extra_small", "deberta_v3_small", "deberta_v3_base",
                    "deberta_v3_large", "deberta_v3_base_multi")},
    **{name: {"vocabulary_size": 60, "hidden_dim": 32, "intermediate_dim": 64, "num_heads": 4,
              "num_layers": 2}
       for name in ("roformer_v2_small", "roformer_v2_base", "roformer_v2_large")},
    # Two stages of 8 x 8 and 4 x 4 cells in windows of 4: shifted windows in the first.
    **{name: {"input_shape": (32, 32, 3), "embed_dim": 16, "depths": (2, 2), "num_heads": (2, 4),
              "window_size": 4}
       for name in ("swin_tiny_patch4_window7_224", "swin_small_patch4_window7_224",
                    "swin_base_patch4_window7_224", "swin_base_patch4_window12_384",
                    "swin_large_patch4_window7_224", "swin_large_patch4_window12_384")},
    # PosENet's backbones are fixed networks (keras.applications, CoAtNet-0): only the
    # input size shrinks, so these stay at the backbones' sizes (15M, 24M, 25M).
    **{f"posenet_{b}": {"backbone": b, "input_shape": (32, 32, 3), "feature_size": 8}
       for b in ("vgg16", "resnet50", "coatnet_0")},
}  # fmt: skip
MAX_PARAMETERS = 5_000_000
FIXED_BACKBONES = {"posenet_vgg16", "posenet_resnet50", "posenet_coatnet_0"}


# One registered model per table of docs/guides/export.md, "Input and output names".
FAMILY_MODELS = {
    "coatnet": "coatnet_0",
    "maxvit": "maxvit_t",
    "maxxvit": "maxxvit_rmlp_nano_rw_256",
    "posenet": "posenet_vgg16",
    "muse_encoder": "muse_encoder_small",
    "convs2s_lm": "convs2s_lm",
    "convs2s": "convs2s_small",
    "muse": "muse_tiny",
    "t5": "t5_small",
    "shaw_transformer": "shaw_transformer_base",
    "music_transformer": "music_transformer_base",
    "decoder_lm": "decoder_lm_tiny",
    "deberta_v3": "deberta_v3_extra_small",
    "roformer_v2": "roformer_v2_small",
    "swin": "swin_tiny_patch4_window7_224",
}
ARTIFACT_DTYPES = {"tensor(float)": "float32", "tensor(int32)": "int32", "tensor(bool)": "bool"}


def family(name: str) -> str:
    """The export guide's table for the registered model ``name``."""
    prefixes = ("posenet", "coatnet", "maxvit", "convs2s_lm", "muse_encoder", "convs2s", "muse")
    later = ("t5", "shaw_transformer", "music_transformer", "decoder_lm", "deberta_v3")
    later = (*later, "roformer_v2", "swin")
    if name.startswith(("maxxvit", "coatnext")):  # timm's ConvNeXt models: one table
        return "maxxvit"
    for prefix in (*prefixes, *later):
        if name.startswith(prefix):
            return prefix
    raise AssertionError(f"{name}: no family table in the export guide")


def guide_tables() -> dict[str, list[tuple]]:
    """``{family: [(graph, "input" | "output", name, shape entries, dtype)]}``, read from
    the tables after each ``<!-- export-names: family -->`` of the export guide."""
    with open(docs_path("guides", "export.md")) as handle:
        text = handle.read()
    tables = {}
    for match in re.finditer(r"<!-- export-names: (\w+) -->\n((?:\|.*\n)+)", text):
        rows = []
        for line in match.group(2).splitlines()[2:]:  # after the header and the rule
            graph, kind, name, shape, dtype = (cell.strip() for cell in line.strip("|").split("|"))
            entries = [e.strip() for e in shape.strip("()").split(",") if e.strip()]
            rows.append((graph, kind, name.strip("`"), entries, dtype))
        tables[match.group(1)] = rows
    return tables


def assert_follows_table(rows: list[tuple], found: list[tuple], lenient: bool = False) -> None:
    """``found`` (``(name, shape, dtype)`` in graph order) is what ``rows`` list, in order.

    A row whose name holds ``<i>`` stands for names with i = 0, 1, ... (at least one).
    In a shape, ``batch`` is a dynamic axis, a number that size, any other word any size;
    ``lenient``: a number may also be dynamic (tf2onnx does not keep every static size of
    an output). A shape and dtype of None (names only) are not checked.
    """
    names = [name for name, _, _ in found]
    position = 0
    for _, _, pattern, entries, dtype in rows:
        indices = itertools.count() if "<i>" in pattern else [0]
        for i in indices:
            name = pattern.replace("<i>", str(i))
            if position == len(found) or found[position][0] != name:
                assert i > 0, f"{pattern!r} expected at position {position} of {names}"
                break
            _, shape, found_dtype = found[position]
            position += 1
            if shape is None and found_dtype is None:
                continue
            assert ARTIFACT_DTYPES.get(found_dtype, found_dtype) == dtype, (name, found_dtype)
            assert len(shape) == len(entries), (name, shape, entries)
            for size, entry in zip(shape, entries):
                if entry == "batch":
                    assert size is None, (name, shape, entries)
                elif entry.isdigit():
                    assert size == int(entry) or (lenient and size is None), (name, shape)
    assert position == len(found), f"{names[position:]} are not in the export guide's table"


def declared_graphs(model: keras.Model) -> dict[str, tuple[list, list]]:
    """``{graph: (inputs, outputs)}`` as ``(name, shape, dtype)``, from the names and the
    specs the export uses, without exporting."""
    if not isinstance(model, Seq2SeqModel):
        inputs, outputs = export_names(model)
        graphs = {
            "model": (
                [(n, x.shape, x.dtype) for n, x in zip(inputs, model.inputs, strict=True)],
                [(n, x.shape, x.dtype) for n, x in zip(outputs, model.outputs, strict=True)],
            )
        }
        if isinstance(model, LanguageModel):  # and its step graph (export_language_model)
            step_in, step_out = language_model.decoding_names(model)
            specs = language_model.decoding_signatures(model)
            logits = [(None, model.vocab_size), "float32"]
            graphs["decoder_step"] = (
                [(n, s.shape, s.dtype) for n, s in zip(step_in, specs, strict=True)],
                [
                    (n, *spec)
                    for n, spec in zip(
                        step_out, [logits, *([s.shape, s.dtype] for s in specs[2:])], strict=True
                    )
                ],
            )
        if getattr(model, "decodes_prompts", False):  # and its prompt graph
            prompt_in, prompt_out = language_model.prompt_names(model)
            specs = language_model.prompt_signature(model)
            logits = [(None, None, model.vocab_size), "float32"]
            graphs["prompt"] = (
                [(n, s.shape, s.dtype) for n, s in zip(prompt_in, specs, strict=True)],
                [
                    (n, *spec)
                    for n, spec in zip(
                        prompt_out, [logits, *([s.shape, s.dtype] for s in specs[1:])], strict=True
                    )
                ],
            )
        return graphs
    names = decoding_names(model)
    encoder_specs, step_specs = decoding_signatures(model)
    state = len(names["encoder"][1])
    cache = step_specs[2:]
    logits = [(None, model.target_vocab_size), "float32"]
    encoder_in, encoder_out = names["encoder"]
    step_in, step_out = names["decoder_step"]
    return {
        "encoder": (
            [(n, s.shape, s.dtype) for n, s in zip(encoder_in, encoder_specs, strict=True)],
            [(n, s.shape, s.dtype) for n, s in zip(encoder_out, cache[:state], strict=True)],
        ),
        "decoder_step": (
            [(n, s.shape, s.dtype) for n, s in zip(step_in, step_specs, strict=True)],
            [
                (n, *spec)
                for n, spec in zip(
                    step_out, [logits, *([s.shape, s.dtype] for s in cache)], strict=True
                )
            ],
        ),
    }


def assert_graph_follows_guide(model_name: str, graph: str, inputs, outputs, lenient=False):
    rows = guide_tables()[family(model_name)]
    for kind, found in (("input", inputs), ("output", outputs)):
        chosen = [row for row in rows if row[0] == graph and row[1] == kind]
        assert chosen, f"the export guide has no {kind}s of {graph!r} for {model_name}"
        assert_follows_table(chosen, [tuple(x) for x in found], lenient)


def test_every_registered_model_has_a_names_table():
    tables = guide_tables()
    assert set(tables) == set(FAMILY_MODELS)
    assert {family(name) for name in zoo.list_models()} == set(FAMILY_MODELS)


# Large: building the six models took 60 s on JAX, 2 s on TensorFlow (2 cores, load 8).
@pytest.mark.large
@pytest.mark.parametrize("table", sorted(FAMILY_MODELS))
def test_export_guide_lists_the_names_of_each_family(table):
    # Names, ranks and dtypes of the graphs as export_model / export_seq2seq declare them
    # (export_model checks that the artifact has these names), without exporting;
    # test_small_variant_exports checks the artifacts of every registered model.
    name = FAMILY_MODELS[table]
    overrides = dict(SMALL_VARIANTS[name])
    if table == "muse":
        overrides["num_decoder_layers"] = 2  # so <i> runs over more than one layer
    model = zoo.create(name, **overrides)
    for graph, (inputs, outputs) in declared_graphs(model).items():
        assert_graph_follows_guide(name, graph, inputs, outputs)


def test_every_registered_model_has_a_small_variant():
    missing = sorted(set(zoo.list_models()) - set(SMALL_VARIANTS))
    assert not missing, f"add a small variant for {missing} to SMALL_VARIANTS"


def same_small_model() -> dict[str, str]:
    """``{name: first name}``: each registered name and the first one (in sorted order) whose
    small variant calls the same builder with the same arguments but the model's name. Those
    build one model under two names (``coatnet_0`` ... ``coatnet_4`` differ only in sizes the
    small variant overrides), so the export tests export it once."""
    firsts, first = {}, {}
    for name in sorted(SMALL_VARIANTS):
        spec = zoo.get_spec(name)
        arguments = {**spec.arguments(), **SMALL_VARIANTS[name]}
        arguments.pop("name", None)
        first[name] = firsts.setdefault((spec.builder, repr(sorted(arguments.items()))), name)
    return first


def serialized_without_name(model: keras.Model) -> str:
    return json.dumps(
        keras.saving.serialize_keras_object(model), sort_keys=True, default=str
    ).replace(json.dumps(model.name), '"<name>"')


def test_names_building_one_small_model_differ_in_the_name_only():
    first = same_small_model()
    assert len(set(first.values())) < len(first)  # coatnet_0 ... coatnet_4 among others
    for name, representative in first.items():
        if name == representative:
            continue
        a, b = (zoo.get_spec(n) for n in (name, representative))
        assert a.builder is b.builder, (name, representative)
        mine, theirs = ({**s.arguments(), **SMALL_VARIANTS[s.name]} for s in (a, b))
        assert {k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)} <= {
            "name"
        }, (name, representative)


@pytest.mark.large
@pytest.mark.parametrize("name", sorted(SMALL_VARIANTS))
def test_small_variant_weights_start_distinct(name):
    # A clean session for each model: automatic layer names ("not_equal_1") come from a
    # counter that each model would otherwise move on.
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    model = zoo.create(name, **SMALL_VARIANTS[name])
    layer_checks.assert_distinct_initial_weights(model)
    representative = same_small_model()[name]
    if representative != name:
        # The builders use the name for the model's name only, so the representative's
        # model stands for this name's (test_small_variant_exports picks among those).
        keras.backend.clear_session()
        keras.utils.set_random_seed(0)
        other = zoo.create(representative, **SMALL_VARIANTS[representative])
        assert serialized_without_name(model) == serialized_without_name(other), name


# The fixed backbones first: tf2onnx needs about 8 GB for posenet_resnet50 (24M parameters),
# and after a hundred exports in one process only 7.6 GB were left (CI's large stage on a
# 24 GB machine), so export_model's memory check refused it.
EXPORT_ORDER = sorted(SMALL_VARIANTS, key=lambda name: (name not in FIXED_BACKBONES, name))


def export_formats(family_names: list[str]) -> dict[str, list[str]]:
    """``{name: formats}`` for the models of one family that are exported, in order: the
    formats go round the models, so each is exported once and the family to every format (a
    family of one or two models gives its first model the formats left over).

    Every model in every format took over a third of the large stage (99 of its cases, 3,340 s
    of the 9,340 s its two workers spent, on a loaded 2-core machine); a family's models share
    its export code, and what differs between them (the options their builders take) is
    traced by any format. benchmarks/export_zoo.py still exports every registered model to
    every format, for the export tables of the docs."""
    chosen = {}
    for i, name in enumerate(family_names):
        formats = [f for j, f in enumerate(FORMATS) if j % len(family_names) == i]
        chosen[name] = formats or [FORMATS[i % len(FORMATS)]]
    return chosen


def kind(name: str) -> str:
    """A model's name without its numbers: ``coatnet_rmlp_1_rw_224`` -> ``coatnet_rmlp__rw_``.
    Names of one kind differ in sizes (the small variants override most of them)."""
    return re.sub(r"\d+", "", name)


def exported_models(family_names: list[str]) -> list[str]:
    """One model per format of a family's distinct small models: the first of each kind
    first, so that a family of many sizes (CoAtNet's eleven) is exported through different
    builders' options. Every distinct model in one format was still 41 cases, about 1,400 s of
    worker time at the 34 s a case measured above; all are exported by
    benchmarks/export_zoo.py."""
    firsts, seen = [], set()
    for name in family_names:
        if kind(name) not in seen:
            seen.add(kind(name))
            firsts.append(name)
    rest = [name for name in family_names if name not in firsts]
    return (firsts + rest)[: len(FORMATS)]


def export_cases() -> list:
    """(name, format) of every export case: each family in every format, each format on
    another of its distinct small models (a model that several names build, differing only in
    its name, counts once: see same_small_model; exported_models picks them). Only tf2onnx on
    the fixed backbones needs several GB (about 8 for posenet_resnet50): those are `memory`,
    run in one process after the others.

    One case of each family is in the `large` tier (CI's large stage), the rest in `full`
    (tests/tiers.py): see large_export_case."""
    exported = set(same_small_model().values())
    families: dict[str, list[str]] = {}
    for name in (n for n in EXPORT_ORDER if n in exported):
        families.setdefault(family(name), []).append(name)
    cases = []
    for index, names in enumerate(families.values()):
        pairs = [
            (name, format)
            for name, formats in export_formats(exported_models(names)).items()
            for format in formats
        ]
        in_ci = large_export_case(pairs, FORMATS[index % len(FORMATS)])
        for name, format in pairs:
            heavy = format == "onnx" and name in FIXED_BACKBONES
            marks = [pytest.mark.large if (name, format) == in_ci else pytest.mark.full]
            marks += [pytest.mark.memory] if heavy else []
            cases.append(pytest.param(name, format, marks=marks, id=f"{name}-{format}"))
    return cases


def large_export_case(pairs: list[tuple[str, str]], preferred: str) -> tuple[str, str]:
    """The one (name, format) of a family's export cases that CI's large stage runs: in the
    format ``preferred`` (which goes round the families, so CI exports to every format),
    never a `memory` case. Every case in every format took about 600 s of the stage's worker
    time (30 cases of about 20 s, docs/development.md "Test tiers"); the others run in `full`."""
    light = [(n, f) for n, f in pairs if not (f == "onnx" and n in FIXED_BACKBONES)]
    return next(((n, f) for n, f in light if f == preferred), light[0])


def test_export_cases_cover_each_family_in_every_format_on_different_models():
    cases = [tuple(case.values) for case in export_cases()]
    assert len(cases) == len(set(cases))
    distinct = set(same_small_model().values())
    assert {name for name, _ in cases} <= distinct
    for fam in {family(name) for name in distinct}:
        models = sorted(name for name in distinct if family(name) == fam)
        chosen = {name for name, _ in cases if family(name) == fam}
        assert {f for name, f in cases if family(name) == fam} == set(FORMATS), fam
        # As many different models as the family has, up to one per format, and different
        # kinds before different sizes of one kind.
        assert len(chosen) == min(len(models), len(FORMATS)), (fam, chosen)
        kinds = {kind(name) for name in models}
        assert len({kind(name) for name in chosen}) == min(len(kinds), len(FORMATS)), fam
    assert kind("coatnet_rmlp_1_rw_224") == "coatnet_rmlp__rw_"
    # Each family once per format (every model in every format was 102 cases, then 42).
    families = {family(name) for name in distinct}
    assert len(cases) == len(families) * len(FORMATS)
    # CI's large stage: one case of each family, never a memory case, every format.
    marked = [(tuple(case.values), {mark.name for mark in case.marks}) for case in export_cases()]
    large = [case for case, marks in marked if "large" in marks]
    assert sorted(family(name) for name, _ in large) == sorted(families)
    assert {format for _, format in large} == set(FORMATS)
    assert not [case for case, marks in marked if {"large", "memory"} <= marks]
    assert all(("large" in marks) != ("full" in marks) for _, marks in marked)


@pytest.mark.parametrize(("name", "format"), export_cases())
def test_small_variant_exports(name, format, tmp_path):
    # Each export starts from a clean Keras state, so earlier cases' graphs can be freed.
    keras.backend.clear_session(free_memory=True)
    keras.utils.set_random_seed(0)
    model = zoo.create(name, **SMALL_VARIANTS[name])
    if name not in FIXED_BACKBONES:
        assert model.count_params() <= MAX_PARAMETERS
    suffix = {"onnx": ".onnx", "litert": ".tflite"}.get(format, "")
    if isinstance(model, Seq2SeqModel):
        reports = export_seq2seq(model, tmp_path / name, format=format)
    else:
        reports = {"model": export_model(model, str(tmp_path / name) + suffix, format=format)}
    if isinstance(model, LanguageModel):
        reports.update(export_language_model(model, tmp_path / f"{name}_step", format=format))
    for graph, report in reports.items():
        assert report.max_abs_difference <= 1e-4, (name, report.max_abs_difference)
        # The artifact's names, ranks and dtypes are those the export guide lists.
        assert_graph_follows_guide(name, graph, report.inputs, report.outputs, lenient=True)
