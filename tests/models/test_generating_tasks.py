"""keras-hub's Seq2SeqLM and CausalLM over the zoo's generating families
(keras_posenc/models/generating.py): ``from_zoo`` gives the zoo model's logits,
``save_to_preset`` then keras-hub's ``from_preset`` gives them again, and ``generate`` on
text runs through keras-hub's task API (preprocessor, ``generate_step``, postprocessor)."""

from __future__ import annotations

import keras
import keras_hub
import numpy as np
import pytest

from keras_posenc import models, zoo
from keras_posenc.models._generating_tasks import copy_weights

pytestmark = pytest.mark.contract

SHAW_X = {
    "encoder_token_ids": np.array([[5, 6, 7, 2], [8, 9, 2, 0]], "int32"),
    "decoder_token_ids": np.array([[1, 7, 6], [1, 9, 0]], "int32"),
}


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def test_shaw_reverse_preset_through_keras_hub(tmp_path):
    task = models.ShawTransformerSeq2SeqLM.from_zoo("shaw_transformer_base", weights="reverse")
    reference = _numpy(zoo.create("shaw_transformer_base", weights="reverse")(SHAW_X))
    np.testing.assert_array_equal(_numpy(task(SHAW_X)), reference)

    task.save_to_preset(tmp_path)
    loaded = keras_hub.models.Seq2SeqLM.from_preset(str(tmp_path))
    assert type(loaded) is models.ShawTransformerSeq2SeqLM
    np.testing.assert_array_equal(_numpy(loaded(SHAW_X)), reference)
    backbone = keras_hub.models.Backbone.from_preset(str(tmp_path))
    assert type(backbone) is models.ShawTransformerBackbone
    np.testing.assert_array_equal(_numpy(backbone(SHAW_X)), reference)
    tokenizer = keras_hub.tokenizers.Tokenizer.from_preset(str(tmp_path))
    assert type(tokenizer) is models.ShawTransformerTokenizer
    assert tokenizer.get_vocabulary() == list(models.REVERSE_VOCABULARY)

    # Text in, text out through keras-hub's Seq2SeqLM.generate: the shipped model reverses.
    assert loaded.generate(["k e r a s", "x y z . 7"]) == ["s a r e k", "7 . z y x"]


def test_decoder_lm_through_keras_hub(tmp_path):
    task = models.DecoderLMCausalLM.from_zoo("decoder_lm_tiny")
    model = zoo.create("decoder_lm_tiny")
    copy_weights(task.backbone, model, "test")
    ids = np.array([[1, 75, 108, 36, 0], [1, 75, 108, 108, 111]], "int32")
    reference = _numpy(model(ids))
    np.testing.assert_array_equal(_numpy(task(ids)), reference)

    task.save_to_preset(tmp_path)
    loaded = keras_hub.models.CausalLM.from_preset(str(tmp_path))
    assert type(loaded) is models.DecoderLMCausalLM
    assert type(loaded.preprocessor.tokenizer) is models.DecoderLMTokenizer
    np.testing.assert_array_equal(_numpy(loaded(ids)), reference)
    backbone = keras_hub.models.Backbone.from_preset(str(tmp_path))
    np.testing.assert_array_equal(_numpy(backbone(ids)), reference)

    # keras-hub's CausalLM.generate gives the zoo model's own greedy text.
    prompts = ["Hi", "Hello"]
    assert loaded.generate(prompts, max_length=10) == model.generate(prompts, max_length=10)


def test_generating_tasks_refuse_bad_calls():
    task = models.DecoderLMCausalLM.from_zoo("decoder_lm_tiny", num_layers=1)
    with pytest.raises(TypeError, match="unknown arguments \\['beams'\\]"):
        task.generate("Hi", max_length=6, beams=2)
    with pytest.raises(ValueError, match="`stop_token_ids` must be 'auto' or \\[2\\]"):
        task.generate("Hi", max_length=6, stop_token_ids=[5])
    with pytest.raises(ValueError, match="'tokenizer' belong to the task"):
        models.DecoderLMBackbone(tokenizer="byte", vocab_size=259)
    with pytest.raises(ValueError, match="is a 'shaw_transformer' model"):
        models.DecoderLMCausalLM.from_zoo("shaw_transformer_base")


def test_word_tokenizer():
    tokenizer = models.ShawTransformerTokenizer(list(models.REVERSE_VOCABULARY))
    assert tokenizer(["a b", "9"])[0].tolist() == [3, 4]
    assert tokenizer.detokenize([[3, 4], [38]]) == ["a b", "9"]
    assert (tokenizer.pad_token_id, tokenizer.start_token_id, tokenizer.end_token_id) == (0, 1, 2)
    with pytest.raises(ValueError, match="the word 'hello' is not in the vocabulary"):
        tokenizer("a hello")
    with pytest.raises(ValueError, match="special tokens \\['</s>'\\]"):
        models.ShawTransformerTokenizer(["<pad>", "<s>", "a"])
    with pytest.raises(ValueError, match="distinct words without whitespace"):
        models.ShawTransformerTokenizer(["<pad>", "<s>", "</s>", "a b"])
