"""Training beyond one device: keras.distribution on JAX, tf.distribute on TensorFlow.

Virtual devices must be configured before an engine starts (JAX's
``--xla_force_host_platform_device_count``, TensorFlow's logical CPU devices), so the
multi-device checks run ``_WORKER`` in a fresh process that picks its own backend. They
are large, and run from the TensorFlow suite only (where CI runs the large tests): the
worker sets its engine itself, so running it again from the JAX or PyTorch suite would
repeat the same check. The guide's scripts (docs/guides/scaling-out.md: JAX with virtual
devices, two JAX processes as two hosts, torch DDP under torchrun) run the same way. The
``layout_map`` unit tests run on every backend.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import keras
import pytest
from repository import docs_path

from keras_posenc import zoo
from keras_posenc.layers import RelativeTransformerBlock2D, RelativeTransformerEncoder

pytestmark = pytest.mark.contract

# Observed: losses and weights after training within 3e-7, ModelParallel forward passes
# within 1e-6 (float32 sums in another order: per-replica gradients are all-reduced,
# sharded matmuls are summed across devices).
TOLERANCE = 1e-5

ONCE_FROM_TENSORFLOW = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="the multi-device check runs its engine (JAX, TensorFlow or torchrun) in its own "
    "subprocesses, whatever the suite's backend; it runs once, from the TensorFlow suite, where "
    "CI runs the large tests",
)

_WORKER = r'''
"""argv[1] names the check; prints one JSON line of results."""
import contextlib
import json
import os
import sys

CHECK = sys.argv[1]
if CHECK.startswith("jax"):
    os.environ["KERAS_BACKEND"] = "jax"
    # Added to the flags the suite set (tests/conftest.py: faster compiles), not instead.
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=2".strip()
else:
    os.environ["KERAS_BACKEND"] = "tensorflow"

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_posenc import zoo  # noqa: E402

STEPS, BATCH = 3, 8


def coatnet(synchronized=False):
    return zoo.create(
        "coatnet_0", input_shape=(32, 32, 3), num_classes=4, blocks=(1, 1, 1, 1, 1),
        channels=(8, 8, 16, 32, 32), head_dim=16, drop_path_rate=0.0,
        synchronized=synchronized,
    )


def muse():
    return zoo.create(
        "muse_tiny", src_vocab_size=20, tgt_vocab_size=20, num_encoder_layers=1,
        num_decoder_layers=1, dropout=0.0, weight_dropout=0.0,
    )


def batches(family):
    rng = np.random.default_rng(0)
    out = []
    for _ in range(STEPS):
        if family == "coatnet":
            x = rng.standard_normal((BATCH, 32, 32, 3)).astype("float32")
            y = rng.integers(0, 4, BATCH)
        else:
            source = rng.integers(3, 20, (BATCH, 7))
            target = rng.integers(3, 20, (BATCH, 6))
            x = {"encoder_token_ids": source, "decoder_token_ids": target[:, :-1]}
            y = target[:, 1:]
        out.append((x, y))
    return out


def train(build, data, initial, scope):
    with scope:
        model = build()
        model.set_weights(initial)
        model.compile(
            optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    # fit, not train_on_batch: under a tf.distribute strategy only fit's data pipeline
    # splits the global batch over the replicas.
    losses = [
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0).history["loss"][0]
        for x, y in data
    ]
    return model, losses


def compare(family, build, distributed_build, scope):
    keras.utils.set_random_seed(0)
    initial = build().get_weights()
    data = batches(family)
    single, single_losses = train(build, data, initial, contextlib.nullcontext())
    distributed, losses = train(distributed_build, data, initial, scope)
    weights = [keras.ops.convert_to_numpy(w) for w in single.weights]
    other = [keras.ops.convert_to_numpy(w) for w in distributed.weights]
    result = {
        "losses_single": single_losses,
        "losses_distributed": losses,
        "loss_diff": max(abs(a - b) for a, b in zip(single_losses, losses)),
        "weight_diff": max(float(np.max(np.abs(a - b))) for a, b in zip(weights, other)),
        "weights_moved": max(float(np.max(np.abs(a - b))) for a, b in zip(weights, initial)),
    }
    if CHECK.startswith("jax"):
        result["weight_devices"] = len(distributed.weights[0].value.sharding.device_set)
    return result


results = {}
if CHECK == "jax_data_parallel":
    import jax

    results["devices"] = len(jax.devices())
    distribution = keras.distribution.DataParallel()
    for family, build in (("coatnet", coatnet), ("muse", muse)):
        results[family] = compare(family, build, build, distribution.scope())
elif CHECK == "tf_mirrored":
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    results["devices"] = strategy.num_replicas_in_sync
    # BatchNorm synchronised across replicas: the statistics of the global batch.
    results["coatnet"] = compare(
        "coatnet", coatnet, lambda: coatnet(synchronized=True), strategy.scope()
    )
    # The control: per-replica statistics, so the batch really was split.
    results["coatnet_unsynchronized"] = compare("coatnet", coatnet, coatnet, strategy.scope())
    results["muse"] = compare("muse", muse, muse, strategy.scope())
elif CHECK == "jax_model_parallel":
    import jax

    from keras_posenc.layers import RelativeTransformerEncoder

    def relative_transformer():
        tokens = keras.Input((None, 32), name="tokens")
        encoder = RelativeTransformerEncoder(intermediate_dim=64, num_heads=2, name="encoder")
        return keras.Model(tokens, encoder(tokens), name="relative_transformer")

    mesh = keras.distribution.DeviceMesh((1, 2), ["batch", "model"], jax.devices())
    rng = np.random.default_rng(1)
    inputs = {
        "coatnet": rng.standard_normal((4, 32, 32, 3)).astype("float32"),
        "muse": batches("muse")[0][0],
        "relative_transformer": rng.standard_normal((4, 9, 32)).astype("float32"),
    }
    for family, build, name in (
        ("coatnet", coatnet, "coatnet_0"),
        ("muse", muse, "muse_tiny"),
        ("relative_transformer", relative_transformer, "relative_transformer"),
    ):
        keras.utils.set_random_seed(0)
        plain = build()
        expected = keras.ops.convert_to_numpy(plain(inputs[family]))
        # The layouts by the model's paths check those by the name's regular expressions.
        by_path = zoo.layout_map(plain, mesh)
        distribution = keras.distribution.ModelParallel(
            layout_map=zoo.layout_map(name, mesh), batch_dim_name="batch"
        )
        with distribution.scope():
            sharded = build()
            sharded.set_weights(plain.get_weights())
            got = keras.ops.convert_to_numpy(sharded(inputs[family]))
        split, wrong = [], []
        for variable in sharded.weights:
            layout = by_path.get(variable.path)
            if layout is None:
                if len(variable.value.sharding.device_set) != 2 or not (
                    variable.value.sharding.is_fully_replicated
                ):
                    wrong.append([variable.path, "not replicated"])
                continue
            spec = tuple(variable.value.sharding.spec)
            spec += (None,) * (len(variable.shape) - len(spec))
            axis = layout.axes.index("model")
            shard = variable.value.addressable_shards[0].data.shape
            if spec != tuple(layout.axes) or shard[axis] * 2 != variable.shape[axis]:
                wrong.append([variable.path, str(spec), list(shard)])
            split.append(variable.path)
        results[family] = {
            "sharded": split,
            "wrong": wrong,
            "forward_diff": float(np.max(np.abs(got - expected))),
            "scale": float(np.max(np.abs(expected))),
        }
        if family != "relative_transformer":  # a layer, not a model with a loss
            results[family]["training"] = compare(family, build, build, distribution.scope())
print(json.dumps(results))
'''


def run_worker(check: str, tmp_path) -> dict:
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    result = subprocess.run(
        [sys.executable, str(script), check],
        cwd=tmp_path,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = "\n".join(result.stderr.strip().splitlines()[-20:])
    assert result.returncode == 0, f"the {check} worker failed:\n{tail}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def assert_matches_one_device(result: dict) -> None:
    assert result["weights_moved"] > 1e-2  # training changed the weights
    assert result["loss_diff"] < TOLERANCE, result
    assert result["weight_diff"] < TOLERANCE, result


# --------------------------------------------------------------------------- data parallel


@pytest.mark.full
@ONCE_FROM_TENSORFLOW
def test_jax_data_parallel_matches_one_device(tmp_path):
    """DataParallel on 2 virtual JAX devices trains as one device on the same global batch.

    BatchNorm needs no synchronisation here: the step is one SPMD program over the global
    batch, so its statistics are the global batch's.
    """
    results = run_worker("jax_data_parallel", tmp_path)
    assert results["devices"] == 2
    for family in ("coatnet", "muse"):
        assert results[family]["weight_devices"] == 2, results[family]
        assert_matches_one_device(results[family])


@pytest.mark.full
@ONCE_FROM_TENSORFLOW
def test_tf_mirrored_strategy_matches_one_device(tmp_path):
    """MirroredStrategy over 2 logical CPUs; CoAtNet with synchronized BatchNorm."""
    results = run_worker("tf_mirrored", tmp_path)
    assert results["devices"] == 2
    assert_matches_one_device(results["coatnet"])
    assert_matches_one_device(results["muse"])
    # Per-replica BatchNorm statistics (4 samples each) train another model: the control
    # shows the global batch really was split over the replicas.
    assert results["coatnet_unsynchronized"]["weight_diff"] > 1e-3


# --------------------------------------------------------------------------- model parallel


@pytest.mark.full
@ONCE_FROM_TENSORFLOW
def test_jax_model_parallel_shards_the_named_kernels(tmp_path):
    results = run_worker("jax_model_parallel", tmp_path)
    expected = {
        "coatnet": {
            "stem_conv1/kernel",
            "stage1_block1/expand_conv/kernel",
            "stage1_block1/depthwise_conv/kernel",
            "stage1_block1/project_conv/kernel",
            "stage3_block1/qkv/kernel",
            "stage3_block1/attention_output/kernel",
            "stage3_block1/ffn_hidden/kernel",
            "stage3_block1/ffn_output/kernel",
        },
        "muse": {
            "encoder_layer_0/self_attention/query/kernel",
            "encoder_layer_0/self_attention/kernel_predictor_15/kernel",
            "encoder_layer_0/self_attention/output/kernel",
            "encoder_layer_0/feedforward_intermediate_dense/kernel",
            "decoder_layer_0/cross_attention/value/kernel",
            "decoder_layer_0/cross_attention/output/kernel",
            "decoder_layer_0/feedforward_output_dense/kernel",
        },
        "relative_transformer": {
            "encoder/self_attention/query/kernel",
            "encoder/self_attention/attention_output/kernel",
            "encoder/feedforward_intermediate_dense/kernel",
            "encoder/feedforward_output_dense/kernel",
        },
    }
    for family, kernels in expected.items():
        result = results[family]
        assert kernels <= set(result["sharded"]), (family, result["sharded"])
        assert result["wrong"] == [], (family, result["wrong"])
        assert result["forward_diff"] < TOLERANCE * max(1.0, result["scale"]), result
        if family != "relative_transformer":
            assert_matches_one_device(result["training"])


# --------------------------------------------------------------------------- the guide

_BASH = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)


def guide() -> pathlib.Path:
    return docs_path("guides", "scaling-out.md")


@pytest.mark.full
@ONCE_FROM_TENSORFLOW
def test_scaling_out_guide_scripts_run(tmp_path):
    """The guide's JAX examples need virtual devices set before JAX starts or two processes,
    torch's needs torchrun: they are ```bash blocks (test_guides.py runs the ```python ones)."""
    blocks = _BASH.findall(guide().read_text())
    assert len(blocks) == 4, "expected data parallel, model parallel, multi-host and DDP"
    python_dir = os.path.dirname(sys.executable)  # the blocks call `python`
    env = dict(os.environ, PATH=python_dir + os.pathsep + os.environ.get("PATH", ""))
    outputs = []
    for block in blocks:
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        tail = "\n".join(result.stderr.strip().splitlines()[-20:])
        assert result.returncode == 0, f"a bash block of scaling-out.md failed:\n{tail}"
        outputs.append(result.stdout)
    assert "['cpu:0', 'cpu:1']" in outputs[0]
    assert "(64, 128) P(None, 'model')" in outputs[1] and "(64, 64)" in outputs[1]
    # Two processes share the output, so their lines can run together: match, not split.
    processes = sorted(re.findall(r"process (\d) of 2: 2 devices, .*?loss ([-\d.e]+)", outputs[2]))
    assert [index for index, _ in processes] == ["0", "1"], outputs[2]
    assert processes[0][1] == processes[1][1], processes
    ranks = sorted(re.findall(r"rank (\d): (\[[^\]]*\])", outputs[3]))
    assert [index for index, _ in ranks] == ["0", "1"] and ranks[0][1] == ranks[1][1], outputs[3]


# --------------------------------------------------------------------------- layout_map


def mesh(model_devices: int = 2) -> keras.distribution.DeviceMesh:
    # Named devices: a LayoutMap only records them, so this runs on every backend.
    devices = [f"cpu:{i}" for i in range(model_devices)]
    return keras.distribution.DeviceMesh((1, model_devices), ["batch", "model"], devices)


def test_layout_map_by_name_shards_kernels_and_replicates_the_rest():
    coatnet = zoo.layout_map("coatnet_2", mesh())
    assert coatnet["stage3_block4/qkv/kernel"].axes == (None, "model")
    assert coatnet["stage3_block4/attention_output/kernel"].axes == ("model", None)
    assert coatnet["stage1_block2/expand_conv/kernel"].axes == (None, None, None, "model")
    assert coatnet["stage1_block2/project_conv/kernel"].axes == (None, None, "model", None)
    for replicated in ("stage3_block4/qkv/bias", "stage1_block2/pre_norm/gamma", "head_norm/beta"):
        assert coatnet[replicated] is None, replicated
    assert coatnet["stage3_block1/relative_bias/table"] is None

    muse = zoo.layout_map("muse_wmt_large", mesh(), model_axis="model")
    assert muse["encoder_layer_3/self_attention/output/kernel"].axes == ("model", None)
    assert muse["decoder_layer_3/cross_attention/output/kernel"].axes == ("model", None, None)
    assert muse["decoder_layer_3/cross_attention/key/kernel"].axes == (None, "model", None)
    assert muse["embedding/token_embedding/embeddings"].axes == (None, "model")
    assert muse["encoder_layer_3/self_attention/gamma"] is None
    assert muse["encoder_layer_3/self_attention/depthwise_kernel_15"].axes == (None, "model")
    assert muse["encoder_layer_3/self_attention/pointwise_15/kernel"].axes == ("model", None)

    relative = zoo.layout_map("relative_transformer", mesh())
    assert relative["encoder/self_attention/attention_output/kernel"].axes == (
        "model",
        None,
        None,
    )


@pytest.mark.large  # about 2 s on JAX, creating the variables
def test_layout_map_of_a_model_picks_each_kernels_layout_by_rank():
    """A CoAtNet block (2D output projection) and a relative Transformer (3D) in one model."""
    block = RelativeTransformerBlock2D(16, head_dim=8, name="block")
    block.build((None, 4, 4, 16))
    encoder = RelativeTransformerEncoder(intermediate_dim=32, num_heads=2, name="encoder")
    encoder.build((None, None, 16))
    # Built, not traced: the layouts read only the variables' paths and shapes.
    model = keras.Sequential([block, encoder])
    layouts = zoo.layout_map(model, mesh())
    assert layouts["block/attention_output/kernel"].axes == ("model", None)
    assert layouts["encoder/self_attention/attention_output/kernel"].axes == ("model", None, None)
    assert layouts["encoder/self_attention/query/kernel"].axes == (None, "model", None)
    assert layouts["block/ffn_hidden/kernel"].axes == (None, "model")
    assert layouts["block/qkv/bias"] is None
    sharded = {v.path for v in model.weights if layouts[v.path] is not None}
    assert len(sharded) == 10  # the block's 4 dense kernels, the encoder's 6
    # 3 devices do not divide the 16 rows of the block's output projection.
    with pytest.raises(ValueError, match=r"layout_map: variable '.*' of shape .* cannot be split"):
        zoo.layout_map(model, mesh(3))


def test_layout_map_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown model 'coatnet_9'"):
        zoo.layout_map("coatnet_9", mesh())
    with pytest.raises(ValueError, match="no model-parallel layout for 'convs2s_small'"):
        zoo.layout_map("convs2s_small", mesh())
    with pytest.raises(TypeError, match="layout_map: `device_mesh` must be a keras.distribution"):
        zoo.layout_map("coatnet_0", (1, 2))
    with pytest.raises(ValueError, match=r"`model_axis` must name an axis .* model_axis='tensor'"):
        zoo.layout_map("coatnet_0", mesh(), model_axis="tensor")
    with pytest.raises(TypeError, match="layout_map: `model` must be a zoo model name or a keras"):
        zoo.layout_map(3, mesh())
    inputs = keras.Input((4,))
    plain = keras.Model(inputs, keras.layers.Dense(2, name="dense")(inputs), name="plain")
    with pytest.raises(ValueError, match="no variable of model 'plain' matches"):
        zoo.layout_map(plain, mesh())


@pytest.mark.large
@pytest.mark.parametrize(
    "name, overrides, sharded",
    [
        # Shared embeddings and static convolutions (the model-parallel worker has the
        # dynamic ones): 2 x (q, k, v, output, 2 depthwise, 2 pointwise, 2 FFN), the
        # decoder's cross-attention q, k, v, output, and the one embedding table.
        (
            "muse_tiny",
            dict(
                src_vocab_size=20,
                tgt_vocab_size=20,
                share_embeddings=True,
                conv="static",
                weight_dropout=0.0,
                num_encoder_layers=1,
                num_decoder_layers=1,
            ),
            2 * 10 + 4 + 1,
        ),
        # Embedding, q, k, v, 2 kernel predictors, output, 2 FFN; the classifier stays whole.
        ("muse_encoder_small", dict(vocab_size=50, num_layers=1), 9),
    ],
)
def test_layout_map_by_name_and_by_model_agree(name, overrides, sharded):
    model = zoo.create(name, **overrides)
    by_name = zoo.layout_map(name, mesh())
    by_model = zoo.layout_map(model, mesh())
    for variable in model.weights:
        named, exact = by_name[variable.path], by_model[variable.path]
        assert (named and named.axes) == (exact and exact.axes), variable.path
    assert sum(by_model[v.path] is not None for v in model.weights) == sharded
