"""keras_posenc.convert.from_fairseq_fconv: fairseq fconv checkpoints -> ConvS2S.

The checkpoints are written by tests/reference/fairseq_checkpoint.py in fairseq's format
(key names, shapes, weight-norm g/v split, args Namespace) with random weights; the
converted model's logits are compared with that file's numpy forward pass of fairseq's
fconv, which reads the same fairseq tensors and ids.
"""

from __future__ import annotations

import argparse
import os
import sys

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import cli
from keras_posenc.convert import (
    fairseq_to_posenc_ids,
    from_fairseq_fconv,
    load_fairseq_checkpoint,
    parse_fairseq_layers,
    read_fairseq_dictionary,
)
from keras_posenc.zoo.convs2s import ConvS2S
from reference.fairseq_checkpoint import (
    EOS,
    PAD,
    TINY,
    fconv_checkpoint,
    fconv_forward,
    write_fconv_checkpoint,
)

pytestmark = pytest.mark.contract

# fairseq ids: sources left-padded (fairseq's default) and right-padded, ending in </s>.
SOURCE = np.array([[PAD, PAD, 5, 6, 7, EOS], [4, 9, 12, 7, 8, EOS], [10, 4, EOS, PAD, PAD, PAD]])
# Targets as fairseq feeds them: </s> first, then the words (right-padded).
PREV = np.array([[EOS, 4, 5, 6, 3], [EOS, 7, 8, 10, 9], [EOS, 6, PAD, PAD, PAD]])


def posenc_logits(model, source, prev):
    """Our logits for fairseq-id inputs: ids swapped, the first target token our bos."""
    decoder_ids = fairseq_to_posenc_ids(prev)
    decoder_ids[:, 0] = model.bos_id
    inputs = {"encoder_token_ids": fairseq_to_posenc_ids(source), "decoder_token_ids": decoder_ids}
    return ops.convert_to_numpy(model(inputs)).astype("float64")


def reference_logits(checkpoint, source, prev):
    """fairseq's logits, columns put in our id order."""
    logits = fconv_forward(checkpoint["model"], checkpoint["args"], source, prev)
    return logits[..., fairseq_to_posenc_ids(np.arange(logits.shape[-1]))]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    path = write_fconv_checkpoint(tmp_path_factory.mktemp("fairseq") / "checkpoint_best.pt")
    return from_fairseq_fconv(path), fconv_checkpoint()


def test_logits_match_the_fairseq_reference(converted):
    model, checkpoint = converted
    assert isinstance(model, ConvS2S)
    assert (model.pad_id, model.bos_id, model.eos_id) == (0, 1, 2)
    assert (model.source_vocab_size, model.target_vocab_size) == (13, 11)
    assert model.max_source_positions == TINY["max_positions"] - 2
    real = PREV != PAD
    np.testing.assert_allclose(
        posenc_logits(model, SOURCE, PREV)[real],
        reference_logits(checkpoint, SOURCE, PREV)[real],
        atol=1e-4,
        rtol=1e-4,
    )


def reference_greedy(checkpoint, source, max_length):
    """Greedy decoding with the reference forward pass over the full prefix, in our ids."""
    rows = []
    for sentence in source:
        prefix, tokens = [EOS], []
        for _ in range(max_length):
            logits = reference_logits(checkpoint, sentence[None], np.array([prefix]))[0, -1]
            logits[[0, 1]] = -np.inf  # generation never emits pad or bos
            token = int(np.argmax(logits))
            tokens.append(token)
            if token == 2:
                break
            prefix.append(int(fairseq_to_posenc_ids(token)))
        rows.append(tokens + [0] * (max_length - len(tokens)))
    return np.array(rows)


def test_greedy_generation_matches_the_reference(converted):
    model, checkpoint = converted
    generated = np.asarray(model.generate(fairseq_to_posenc_ids(SOURCE), max_length=5))
    np.testing.assert_array_equal(generated, reference_greedy(checkpoint, SOURCE, 5))


def test_save_load_round_trip(converted, tmp_path):
    model, _ = converted
    path = str(tmp_path / "fconv.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(
        posenc_logits(loaded, SOURCE, PREV), posenc_logits(model, SOURCE, PREV), atol=1e-6
    )


def test_old_checkpoint_shared_output_and_cfg_layout():
    """Decoder convolutions normalised over dim 0 (no decoder.version, fairseq < version 2),
    fc3 tied to the target embedding, args under cfg['model'] as a dict, numpy tensors."""
    checkpoint = fconv_checkpoint(seed=3, share=True, decoder_version=None)
    shapes = {k: tuple(v.shape) for k, v in checkpoint["model"].items()}
    assert shapes["decoder.convolutions.0.weight_g"] == (3, 1, 1)
    assert "decoder.fc3.bias" not in shapes
    new_style = {
        "cfg": {"model": vars(checkpoint["args"])},
        "model": {k: v.numpy() for k, v in checkpoint["model"].items()},
    }
    model = from_fairseq_fconv(new_style, src_vocab_size=13, tgt_vocab_size=11)
    real = PREV != PAD
    np.testing.assert_allclose(
        posenc_logits(model, SOURCE, PREV)[real],
        reference_logits(checkpoint, SOURCE, PREV)[real],
        atol=1e-4,
        rtol=1e-4,
    )


@pytest.mark.large
def test_weight_norm_model_matches_and_exports(tmp_path):
    """A narrower output embedding, the converted model keeping weight norm, and the
    encoder / decoder-step export verified against Keras."""
    from keras_posenc.export import export_seq2seq

    config = dict(TINY, decoder_out_embed_dim=6)
    path = write_fconv_checkpoint(tmp_path / "model.pt", config=config, seed=4)
    model = from_fairseq_fconv(path, weight_norm=True)
    assert model.weight_norm and model.decoder_out_embed_dim == 6
    real = PREV != PAD
    np.testing.assert_allclose(
        posenc_logits(model, SOURCE, PREV)[real],
        reference_logits(fconv_checkpoint(config, seed=4), SOURCE, PREV)[real],
        atol=1e-4,
        rtol=1e-4,
    )
    reports = export_seq2seq(model, tmp_path / "onnx", format="onnx")
    assert set(reports) == {"encoder", "decoder_step"}


def state_and_args():
    checkpoint = fconv_checkpoint()
    return dict(checkpoint["model"]), checkpoint["args"]


@pytest.mark.neutral
def test_missing_and_unexpected_keys_are_listed():
    state, args = state_and_args()
    del state["decoder.attention.1.in_projection.weight_g"]
    state["decoder.layer_norm.weight"] = state["decoder.fc2.bias"]
    with pytest.raises(ValueError) as error:
        from_fairseq_fconv(state, args=args)
    message = str(error.value)
    assert "missing keys: ['decoder.attention.1.in_projection.weight_g']" in message
    assert "unexpected keys: ['decoder.layer_norm.weight']" in message


@pytest.mark.neutral
def test_shape_mismatch_names_the_key():
    state, args = state_and_args()
    state["encoder.convolutions.1.weight_v"] = state["encoder.convolutions.1.weight_v"][:2]
    expected = r"'encoder.convolutions.1.weight_v' must have shape \(3, 8, 16\) .* got \(2, 8, 16\)"
    with pytest.raises(ValueError, match=expected):
        from_fairseq_fconv(state, args=args)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"arch": "fconv_self_att_wp"}, "architecture 'fconv_self_att_wp' is not supported"),
        ({"decoder_attention": "[True, False, True]"}, "only attention in every decoder layer"),
        ({"encoder_layers": "__import__('os').system('true')"}, "written with literals"),
        ({"encoder_layers": "[(8, 3)] * 3"}, "missing keys"),
        ({"decoder_embed_dim": 16}, "args.decoder_embed_dim is 16"),
    ],
)
@pytest.mark.neutral
def test_bad_arguments(change, message):
    state, args = state_and_args()
    args = argparse.Namespace(**{**vars(args), **change})
    with pytest.raises(ValueError, match=message):
        from_fairseq_fconv(state, args=args)


@pytest.mark.neutral
def test_bare_state_dict_needs_args_and_vocab_sizes_are_checked():
    state, args = state_and_args()
    with pytest.raises(ValueError, match="pass `args=`"):
        from_fairseq_fconv(state)
    with pytest.raises(ValueError, match="`src_vocab_size` is 12 but"):
        from_fairseq_fconv({"args": args, "model": state}, src_vocab_size=12)


@pytest.mark.neutral
def test_layer_spec_parser():
    assert parse_fairseq_layers("[(512, 3)] * 2 + [(768, 3, 0)] * 1") == [
        (512, 3),
        (512, 3),
        (768, 3, 0),
    ]
    for bad in ("[(512, 3)] * 10**9", "[(512, 3.5)]", "open('x')", "[(1,)]", "[]"):
        with pytest.raises(ValueError, match="parse_fairseq_layers"):
            parse_fairseq_layers(bad)


_EXECUTED = []


def _mark_executed():
    _EXECUTED.append(True)
    return {}


class _Payload:
    """Unpickling this calls _mark_executed: what weights_only loading must refuse to do."""

    def __reduce__(self):
        return (_mark_executed, ())


@pytest.mark.neutral
def test_checkpoints_with_other_pickled_objects_are_rejected(tmp_path):
    import torch

    checkpoint = fconv_checkpoint()
    checkpoint["extra_state"]["train_meters"] = _Payload()
    path = tmp_path / "unsafe.pt"
    torch.save(checkpoint, path)
    with pytest.raises(ValueError, match="holds pickled objects other than"):
        load_fairseq_checkpoint(path)
    assert not _EXECUTED


@pytest.mark.neutral
def test_missing_torch_gives_the_install_hint(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "keras-posenc\[torch\]"'):
        from_fairseq_fconv(tmp_path / "model.pt")


@pytest.mark.neutral
def test_token_ids_and_dictionary():
    ids = fairseq_to_posenc_ids(np.array([[0, 1, 2, 3, 4]]))
    np.testing.assert_array_equal(ids, [[1, 0, 2, 3, 4]])
    np.testing.assert_array_equal(fairseq_to_posenc_ids(ids), [[0, 1, 2, 3, 4]])
    tokens = read_fairseq_dictionary(["hello 5", "world 3"])
    assert tokens == ["<pad>", "<s>", "</s>", "<unk>", "hello", "world"]
    with pytest.raises(ValueError, match="line 2"):
        read_fairseq_dictionary(["hello 5", "broken"])


def test_cli_converts_a_checkpoint(tmp_path, capsys):
    source = write_fconv_checkpoint(tmp_path / "model.pt", seed=1)
    out = str(tmp_path / "fconv.keras")
    assert cli.main(["convert", "fairseq", source, "--out", out]) == 0
    assert "to " + out in capsys.readouterr().out
    loaded = keras.models.load_model(out)
    real = PREV != PAD
    np.testing.assert_allclose(
        posenc_logits(loaded, SOURCE, PREV)[real],
        reference_logits(fconv_checkpoint(seed=1), SOURCE, PREV)[real],
        atol=1e-4,
        rtol=1e-4,
    )
    assert cli.main(["convert", "fairseq", source, "--out", str(tmp_path / "x.h5")]) == 1
    assert os.path.exists(out)
