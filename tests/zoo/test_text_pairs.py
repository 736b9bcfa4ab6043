"""``preprocess_text_pairs`` gives a model only the inputs it takes: an encoder-decoder that
computes its padding masks from the ids (Shaw's, MUSE's, ConvS2S's) received T5's four keys,
and Keras matched them to its two inputs in the wrong order (keras_posenc/zoo/text.py).
Of the zoo's encoder-decoders only T5 holds a tokenizer; a subclass of Shaw's that holds one,
as a user's own model may, shows the two-input case."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_posenc.zoo.relative_transformers import ShawTransformer
from keras_posenc.zoo.t5 import T5

pytestmark = pytest.mark.neutral

PAIRS = {"encoder_text": ["abc", "hello"], "decoder_text": ["cba", "olleh"]}


def test_the_packed_inputs_are_the_models_inputs_and_evaluate_reads_them_by_name():
    keras.utils.set_random_seed(0)
    shaw = ShawTransformer(
        vocabulary_size=259, hidden_dim=16, intermediate_dim=32, num_heads=2, num_layers=1,
        max_distance=4, dropout=0.0,
    )  # fmt: skip
    shaw._init_tokenizer("byte")  # what T5's constructor does with tokenizer="byte"
    x, y, weight = shaw.preprocess_text_pairs(PAIRS)
    pass
    by_name = {
        "encoder_token_ids": keras.ops.convert_to_tensor(x["encoder_token_ids"]),
        "decoder_token_ids": keras.ops.convert_to_tensor(x["decoder_token_ids"]),
    }
    logits = keras.ops.convert_to_numpy(shaw(by_name))
    # fit's and predict's path: the packed dict as a whole (with the masks too, Keras read the
    # source as the decoder's ids).
    np.testing.assert_allclose(shaw.predict(x, verbose=0), logits, atol=1e-5)
    assert y.shape == weight.shape == x["decoder_token_ids"].shape
    t5 = T5(259, hidden_dim=8, intermediate_dim=16, num_heads=2, num_layers=1, eos_id=2,
            tokenizer="byte")  # fmt: skip
    x, _, _ = t5.preprocess_text_pairs(PAIRS)  # T5 takes the masks
    assert sorted(x) == sorted(t5.input)
    assert len(x) == 4
