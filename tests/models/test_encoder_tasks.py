"""The text encoders through keras-hub's API (keras_posenc/models/encoders.py,
encoder_lms.py): DeBERTa v3 and RoFormer v2 as keras-hub backbones, text classifiers and
masked language models.

For one tiny model per family (default tier): ``Task.from_zoo(name, weights=...)`` gives
the backbone the weights ``zoo.create(name, weights=...)`` loads (equal sequence outputs)
and ``backbone.to_zoo()`` returns them; ``save_to_preset`` then keras-hub's own
``TextClassifier.from_preset`` and ``Backbone.from_preset`` rebuild our classes with equal
outputs; ``predict`` on a list of strings runs through the preprocessor (keras-hub's
SentencePiece / WordPiece tokenizers, built here on a few lines) and gives the loaded
task's numbers. Bad arguments are refused with the class and argument named. The masked
language models (large tier, TensorFlow) equal keras-hub's own on the same weights, round
trip a preset and a ``.keras`` file, and keras-hub's own presets still load as its classes.
"""

from __future__ import annotations

import io

import keras
import keras_hub
import numpy as np
import pytest
import sentencepiece

from keras_posenc import models, zoo

pytestmark = pytest.mark.contract

LINES = [
    "the quick brown fox jumps over the lazy dog",
    "a position encoding tells attention where each token stands",
    "rotary embeddings turn queries and keys by an angle",
]
TEXTS = ["the quick brown fox", "rotary embeddings turn keys by an angle per position"]
TINY = {"num_layers": 1, "num_heads": 2, "hidden_dim": 8, "intermediate_dim": 16}


def deberta_tokenizer() -> models.DebertaV3Tokenizer:
    """keras-hub's DeBERTa v3 tokenizer on a SentencePiece model trained on LINES, with the
    special pieces it expects ([PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3)."""
    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(LINES * 4), model_writer=proto, vocab_size=40,
        model_type="word", pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]",
        bos_piece="[CLS]", eos_piece="[SEP]", unk_piece="[UNK]", minloglevel=2,
        hard_vocab_limit=False,
    )  # fmt: skip
    return models.DebertaV3Tokenizer(proto=proto.getvalue())


def roformer_tokenizer() -> models.RoformerV2Tokenizer:
    """keras-hub's RoFormer v2 (WordPiece) tokenizer on LINES' words, [PAD] at id 0 (the
    backbone's padding id)."""
    words = sorted({word for line in LINES for word in line.split()})
    return models.RoformerV2Tokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])


FAMILIES = {
    "deberta_v3_extra_small": (
        models.DebertaV3TextClassifier,
        deberta_tokenizer,
        {"bucket_size": 4, "max_sequence_length": 16},
    ),
    "roformer_v2_small": (models.RoformerV2TextClassifier, roformer_tokenizer, {}),
}


def numpy(x):
    return keras.ops.convert_to_numpy(x)


def inputs_of(preprocessor, texts):
    """The preprocessor's packed ids for ``texts``, as NumPy."""
    return {key: numpy(value) for key, value in preprocessor(texts).items()}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_from_zoo_save_to_preset_and_keras_hub_from_preset(name, tmp_path):
    task_cls, make_tokenizer, options = FAMILIES[name]
    tokenizer = make_tokenizer()
    preprocessor = task_cls.preprocessor_cls(tokenizer, sequence_length=12)
    arguments = {**TINY, **options, "vocabulary_size": tokenizer.vocabulary_size()}
    reference = zoo.create(name, **arguments)
    for variable in reference.weights:  # not the initial values: every weight matters
        variable.assign(np.random.default_rng(7).normal(0, 0.5, variable.shape))
    reference.save_weights(tmp_path / "zoo.weights.h5")

    task = task_cls.from_zoo(
        name,
        num_classes=3,
        weights=str(tmp_path / "zoo.weights.h5"),
        preprocessor=preprocessor,
        head={"dropout": 0.1},
        **arguments,
    )
    assert isinstance(task.backbone, task_cls.backbone_cls)
    x = inputs_of(preprocessor, TEXTS)
    assert x["token_ids"].shape == (2, 12) and (x["token_ids"] == 0).any()  # padded
    expected = numpy(reference(x))
    np.testing.assert_allclose(numpy(task.backbone(x)), expected, rtol=1e-5, atol=1e-5)
    back = task.backbone.to_zoo()
    assert type(back) is type(reference)
    np.testing.assert_allclose(numpy(back(x)), expected, rtol=1e-5, atol=1e-5)

    folder = tmp_path / "preset"
    task.save_to_preset(str(folder))
    loaded = keras_hub.models.TextClassifier.from_preset(str(folder))
    assert type(loaded) is task_cls and type(loaded.backbone) is task_cls.backbone_cls
    assert type(loaded.preprocessor) is task_cls.preprocessor_cls
    assert type(loaded.preprocessor.tokenizer) is type(tokenizer)
    np.testing.assert_allclose(numpy(loaded(x)), numpy(task(x)), rtol=1e-5, atol=1e-5)
    backbone = keras_hub.models.Backbone.from_preset(str(folder))
    assert type(backbone) is task_cls.backbone_cls
    np.testing.assert_allclose(numpy(backbone(x)), expected, rtol=1e-5, atol=1e-5)

    # keras-hub's task API: raw strings through the loaded preprocessor.
    predicted = loaded.predict(TEXTS, verbose=0)
    assert predicted.shape == (2, 3)
    np.testing.assert_allclose(predicted, numpy(task(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.neutral
def test_bad_arguments_are_refused_with_the_class_named():
    with pytest.raises(ValueError, match=r"DebertaV3Backbone.from_zoo: 'roformer_v2_small'"):
        models.DebertaV3TextClassifier.from_zoo("roformer_v2_small", num_classes=2)
    with pytest.raises(ValueError, match=r"RoformerV2TextClassifier.from_zoo: `head`.*'units'"):
        models.RoformerV2TextClassifier.from_zoo(
            "roformer_v2_small", num_classes=2, head={"units": 4}
        )
    with pytest.raises(ValueError, match="unknown override .include_top."):
        models.RoformerV2Backbone.from_zoo("roformer_v2_small", include_top=False)


def test_roformer_tasks_refuse_a_tokenizer_that_pads_with_another_id():
    words = sorted({word for line in LINES for word in line.split()})
    tokenizer = models.RoformerV2Tokenizer(["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]", *words])
    backbone = models.RoformerV2Backbone(vocabulary_size=tokenizer.vocabulary_size(), **TINY)
    classifier_preprocessor = models.RoformerV2TextClassifierPreprocessor(tokenizer)
    with pytest.raises(ValueError, match=r"RoformerV2TextClassifier: .* pads with id 3 .*pad_id=0"):
        models.RoformerV2TextClassifier(backbone, 2, preprocessor=classifier_preprocessor)
    with pytest.raises(ValueError, match=r"RoformerV2MaskedLM: .* pads with id 3"):
        models.RoformerV2MaskedLM(backbone, models.RoformerV2MaskedLMPreprocessor(tokenizer))
    # A backbone that masks id 3 takes it.
    backbone = models.RoformerV2Backbone(
        vocabulary_size=tokenizer.vocabulary_size(), pad_id=3, **TINY
    )
    models.RoformerV2TextClassifier(backbone, 2, preprocessor=classifier_preprocessor)


def keras_hub_masked_lm(name, vocabulary_size):
    """keras-hub's own masked LM of the family (random weights, the head's too), its backbone
    converted to the zoo's model by `keras_posenc.convert`."""
    from keras_posenc.convert import from_keras_hub_deberta_v3, from_keras_hub_roformer_v2

    rng = np.random.default_rng(3)
    if name.startswith("deberta"):
        theirs = keras_hub.models.DebertaV3MaskedLM(
            keras_hub.models.DebertaV3Backbone(
                vocabulary_size=vocabulary_size, bucket_size=4, max_sequence_length=16, **TINY
            )
        )
        convert = from_keras_hub_deberta_v3
    else:
        theirs = keras_hub.models.RoformerV2MaskedLM(
            keras_hub.models.RoformerV2Backbone(
                vocabulary_size=vocabulary_size, head_size=4, **TINY
            )
        )
        convert = from_keras_hub_roformer_v2
    for variable in theirs.weights:
        variable.assign(rng.normal(0, 0.5, variable.shape))
    return theirs, convert(theirs.backbone)


@pytest.mark.large
# keras-hub's tasks define their own compile(): Keras warns that it does not recompile them.
@pytest.mark.filterwarnings("ignore:`compile\\(\\)` was not called:UserWarning")
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_masked_lm_equals_keras_hubs_and_round_trips_a_preset(name, tmp_path):
    task_cls, make_tokenizer, options = FAMILIES[name]
    masked_lm_cls = getattr(models, task_cls.__name__.replace("TextClassifier", "MaskedLM"))
    tokenizer = make_tokenizer()
    theirs, converted = keras_hub_masked_lm(name, tokenizer.vocabulary_size())
    converted.save_weights(tmp_path / "zoo.weights.h5")
    preprocessor = masked_lm_cls.preprocessor_cls(
        tokenizer, sequence_length=12, mask_selection_rate=0.3, mask_selection_length=3
    )
    ours = masked_lm_cls.from_zoo(
        name,
        weights=str(tmp_path / "zoo.weights.h5"),
        preprocessor=preprocessor,
        vocabulary_size=tokenizer.vocabulary_size(),
        **TINY,
        **options,
    )
    # keras-hub's head weights (DeBERTa's dense, norm and bias; RoFormer's has none), by path.
    # The tied token embedding is the backbone's: from the zoo's weights, not copied here.
    head = {v.path: v for v in ours.masked_lm_head.weights if v.path.startswith("mlm_head/")}
    for variable in theirs.masked_lm_head.weights:
        if variable.path.startswith("mlm_head/"):
            head.pop(variable.path).assign(variable)
    assert not head
    x = {key: numpy(value) for key, value in preprocessor(TEXTS)[0].items()}
    if name.startswith("roformer"):
        x["token_ids"] = np.where(x["token_ids"] == 0, 9, x["token_ids"])  # no padding (module)
    logits = numpy(ours(x))
    assert logits.shape == (2, 3, tokenizer.vocabulary_size())
    np.testing.assert_allclose(logits, numpy(theirs(x)), rtol=1e-4, atol=1e-4)

    ours.save_to_preset(str(tmp_path / "preset"))
    loaded = keras_hub.models.MaskedLM.from_preset(str(tmp_path / "preset"))
    assert type(loaded) is masked_lm_cls and type(loaded.preprocessor) is type(preprocessor)
    np.testing.assert_allclose(numpy(loaded(x)), logits, rtol=1e-5, atol=1e-5)
    # keras-hub's own presets still load as keras-hub's classes (ours bind our backbones).
    theirs.save_to_preset(str(tmp_path / "theirs"))
    again = keras_hub.models.MaskedLM.from_preset(str(tmp_path / "theirs"))
    assert type(again) is type(theirs) and type(again.backbone) is type(theirs.backbone)
    ours.save(tmp_path / "masked_lm.keras")  # the tied embedding's view serialises too
    reloaded = keras.saving.load_model(tmp_path / "masked_lm.keras")
    np.testing.assert_allclose(numpy(reloaded(x)), logits, rtol=1e-5, atol=1e-5)
