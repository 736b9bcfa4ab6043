"""Convert timm's CoAtNet and MaxViT checkpoints (``maxxvit.py``) into keras-posenc models.

timm's trained CoAtNets are its ``coatnet_*_rw_*``, ``coatnet_bn_*`` and
``coatnet_rmlp_*`` variants, which differ from the paper in ways our
:func:`~keras_posenc.zoo.coatnet.build_coatnet` describes as configuration (see
:data:`~keras_posenc.zoo.coatnet.TIMM_CONFIGS`); its MaxViTs are the official weights'
port (``maxvit_*_tf_*``) and its own ``maxvit_*_rw_*``
(:func:`~keras_posenc.zoo.maxvit.build_maxvit`); its MaxxViTs and CoAtNeXt, with
ConvNeXt blocks, are :func:`~keras_posenc.zoo.maxxvit.build_maxxvit`'s. The converters
build the matching
model and copy every tensor in, checking that each key of the state dict is used
exactly once and has the shape the architecture needs:

- convolutions ``(out, in, kh, kw)`` -> Keras ``(kh, kw, in, out)``; depthwise
  ``(C, 1, kh, kw)`` -> ``(kh, kw, C, 1)``; the 1 x 1 convolutions timm uses as
  dense layers (squeeze-excitation, attention, MLP) -> ``(in, out)``;
- BatchNorm ``weight``/``bias``/``running_mean``/``running_var`` -> gamma, beta
  and the moving statistics (``num_batches_tracked`` is not needed);
- the attention's ``qkv`` rows are timm's head-first layout (per head ``q``, ``k``,
  ``v``), reordered to ours (``q`` of all heads, then ``k``, then ``v``);
- the relative position table ``((2h-1)(2w-1), heads)`` -> ``(heads, 2h-1, 2w-1)``
  (both index offsets query minus key, row-major), resized bilinearly as timm
  does when the model is built for another input size; the official MaxViT code's
  ``(heads, 2h-1, 2w-1)`` tables (timm's ``RelPosBiasTf``) index key minus query and
  are flipped, and its ``qkv`` rows are already ours;
- the MLP of a ``RelPosMlp`` (``coatnet_rmlp_*``): ``Linear`` weights transposed into
  :class:`~keras_posenc.layers.ContinuousPositionBias2D`'s kernels.

timm's pretrained CoAtNets expect RGB images scaled to [-1, 1] (mean and std 0.5),
channels last here (``(batch, height, width, 3)``), at 224 x 224 (bicubic resize,
crop ratio 0.9 or 0.95).

Checkpoint files are untrusted: ``.safetensors`` files (what the Hugging Face hub
serves) are read by the ``safetensors`` library's numpy API (no code runs), and
PyTorch files (``.pth``, ``.pt``, ``.bin``) with ``torch.load(...,
weights_only=True)``, which executes no pickled code.

The package has one module per job (docs/development.md, "Architecture"), importing
each other one way (``conversion`` -> ``checkpoint``, ``mapping``; ``configs`` stands
alone): ``checkpoint`` (:func:`load_timm_state_dict` and the variant a state dict
implies), ``configs`` (:func:`config_from_timm`, :func:`maxvit_config_from_timm`),
``mapping`` (each variable's timm key and layout) and ``conversion``
(:func:`from_timm_coatnet`, :func:`from_timm_maxvit`, :func:`to_timm_state_dict`).
"""

from keras_posenc.convert.timm.checkpoint import load_timm_state_dict
from keras_posenc.convert.timm.configs import (
    config_from_timm,
    maxvit_config_from_timm,
    maxxvit_config_from_timm,
)
from keras_posenc.convert.timm.conversion import (
    from_timm_coatnet,
    from_timm_maxvit,
    from_timm_maxxvit,
    to_timm_state_dict,
)

__all__ = [
    "config_from_timm",
    "from_timm_coatnet",
    "from_timm_maxvit",
    "from_timm_maxxvit",
    "load_timm_state_dict",
    "maxvit_config_from_timm",
    "maxxvit_config_from_timm",
    "to_timm_state_dict",
]
