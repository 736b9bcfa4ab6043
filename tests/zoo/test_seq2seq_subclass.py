"""Writing an encoder-decoder of one's own: the public subclassing contract of
``zoo.Seq2SeqModel`` (keras_posenc/zoo/seq2seq.py).

A subclass creates its layers, then calls ``super().__init__`` with its token ids and
limits; the base checks them, builds the functional graph from ``encode`` and ``decode`` and
initialises ``keras.Model``. What a Keras user expects of it: its config and ``.keras``
file, ``fit``, ``generate``, ``translate``, and errors that name the subclass.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import zoo

pytestmark = pytest.mark.contract

SOURCE = np.array([[5, 6, 7, 2], [8, 9, 2, 0]], "int32")
TARGET_IN = np.array([[1, 7, 6, 5], [1, 9, 8, 2]], "int32")


def to_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor))


@keras.saving.register_keras_serializable(package="keras_posenc_tests")
class Recurrent(zoo.Seq2SeqModel):
    """The mean source embedding, then a causal running sum of target embeddings: a decoder
    with a state (the sum so far) that its cache carries, named as the export names it."""

    def __init__(self, vocab_size=12, width=8, max_target_length=None, **kwargs):
        self.vocab_size, self.width = vocab_size, width
        self.embedding = keras.layers.Embedding(vocab_size, width, name="embedding")
        self.head = keras.layers.Dense(vocab_size, name="head")
        super().__init__(
            source_vocab_size=vocab_size,
            target_vocab_size=vocab_size,
            max_target_length=max_target_length,
            **kwargs,
        )

    def encode(self, encoder_token_ids, training=None):
        mask = ops.cast(ops.not_equal(encoder_token_ids, self.pad_id), "float32")
        total = ops.sum(self.embedding(encoder_token_ids) * ops.expand_dims(mask, -1), axis=1)
        return (total / ops.maximum(ops.sum(mask, axis=1, keepdims=True), 1.0),)

    def decode(self, decoder_token_ids, encoder_state, training=None):
        running = ops.cumsum(self.embedding(decoder_token_ids), axis=1)
        return self.head(running + ops.expand_dims(encoder_state[0], 1))

    def init_cache(self, encoder_state, max_length):
        return (encoder_state[0], ops.zeros_like(encoder_state[0]))

    def decode_step(self, token_ids, cache, index):
        context, running = cache
        running = running + self.embedding(token_ids)
        return self.head(running + context), (context, running)

    def encoder_state_names(self):
        return ("context",)

    def cache_names(self):
        return ("context", "cache_running_sum")

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "width": self.width,
            "max_target_length": self.max_target_length,
        }


def test_the_base_checks_the_ids_and_builds_the_graph():
    model = Recurrent(name="recurrent", max_target_length=9)
    assert (model.source_vocab_size, model.target_vocab_size) == (12, 12)
    assert (model.pad_id, model.bos_id, model.eos_id) == (0, 1, 2)
    assert (model.max_source_length, model.max_target_length) == (None, 9)
    assert sorted(model.input) == ["decoder_token_ids", "encoder_token_ids"]
    assert model.output_names == ["logits"]
    # Every layer the graph calls is tracked: its weights are the model's.
    layers = (model.embedding, model.head)
    assert {id(v) for v in model.weights} == {id(v) for layer in layers for v in layer.weights}
    logits = model({"encoder_token_ids": SOURCE, "decoder_token_ids": TARGET_IN})
    assert tuple(logits.shape) == (2, 4, 12)
    # Cached decoding equals the teacher-forced pass at every position.
    cache = model.init_cache(model.encode(SOURCE), 4)
    for index in range(4):
        step, cache = model.decode_step(TARGET_IN[:, index], cache, index)
        np.testing.assert_allclose(to_numpy(step), to_numpy(logits)[:, index], atol=1e-5)


def test_config_and_keras_file_round_trip(tmp_path):
    model = Recurrent(vocab_size=10, width=4, name="recurrent")
    model.trainable = False
    config = model.get_config()
    assert config == {
        "dtype": "float32",  # the layers' policy, which a functional model's config lacks
        "name": "recurrent",
        "trainable": False,
        "vocab_size": 10,
        "width": 4,
        "max_target_length": None,
    }
    assert Recurrent.from_config(config).get_config() == config
    path = str(tmp_path / "recurrent.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded) is Recurrent and not loaded.trainable
    inputs = {"encoder_token_ids": SOURCE, "decoder_token_ids": TARGET_IN}
    np.testing.assert_allclose(to_numpy(loaded(inputs)), to_numpy(model(inputs)), atol=1e-6)


def test_fit_generate_and_translate():
    keras.utils.set_random_seed(0)
    model = Recurrent()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    inputs = {"encoder_token_ids": SOURCE, "decoder_token_ids": TARGET_IN}
    target = np.concatenate([TARGET_IN[:, 1:], np.full((2, 1), 2, "int32")], axis=1)
    history = model.fit(inputs, target, epochs=3, batch_size=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert model.generate(SOURCE, max_length=5, beam_size=2).shape == (2, 5)

    class Pipeline:
        """The two things `translate` needs of a text pipeline, on fixed ids."""

        source_vocab_size = target_vocab_size = 12

        def encode(self, texts, max_length=None):
            return SOURCE[: len(texts)]

        def decode(self, ids):
            return [" ".join(str(i) for i in row) for row in np.asarray(ids)]

    text = model.translate("five six seven", beam_size=1, max_length=3, preprocessor=Pipeline())
    assert isinstance(text, str) and text


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        ({"vocab_size": 2}, ValueError, r"Recurrent: `source_vocab_size` must be at least 3"),
        ({"eos_id": 1}, ValueError, r"Recurrent: `pad_id`, `bos_id` and `eos_id` must differ"),
        ({"pad_id": 12}, ValueError, r"Recurrent: `pad_id` must be a token id below"),
        ({"max_target_length": 2.5}, TypeError, r"Recurrent: `max_target_length` must be an"),
    ],
)
def test_bad_arguments_name_the_subclass(arguments, error, message):
    with pytest.raises(error, match=message):
        Recurrent(**arguments)


def test_a_subclass_without_vocabularies_is_told_what_to_pass():
    class Forgetful(Recurrent):
        def __init__(self, **kwargs):
            self.embedding = keras.layers.Embedding(12, 4)
            zoo.Seq2SeqModel.__init__(self, **kwargs)

    with pytest.raises(TypeError, match=r"Forgetful: `source_vocab_size` must be an integer"):
        Forgetful()
