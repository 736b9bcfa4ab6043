"""Weight converters: checkpoints of other libraries as keras-posenc models.

- :func:`from_fairseq_fconv`: fairseq ``fconv`` (ConvS2S) checkpoints ->
  :class:`~keras_posenc.zoo.convs2s.ConvS2S` (PyTorch needed only to read ``.pt`` files);
  :func:`from_fairseq_archive` reads a whole translation archive (checkpoint, BPE codes,
  dictionaries) into the model and its text pipeline.
- :func:`from_timm_coatnet`: timm CoAtNet checkpoints (its ``coatnet_*_rw_*``,
  ``coatnet_bn_*`` and ``coatnet_rmlp_*`` variants, ``.safetensors`` or PyTorch files) ->
  the zoo's CoAtNet with timm's options; :func:`from_timm_maxvit` the same for timm's
  MaxViTs (``maxvit_*_tf_*``, the official weights' port, ``maxvit_*_rw_*`` and
  ``maxvit_rmlp_*``), :func:`from_timm_maxxvit` for its ConvNeXt models
  (``maxxvit_rmlp_*``, ``maxxvitv2_*``, ``coatnext_*``);
  :func:`to_timm_state_dict` goes back (e.g. after fine-tuning in Keras).
- :func:`from_keras_hub_t5`: a keras-hub ``T5Backbone`` (any keras-hub T5 preset) ->
  :class:`~keras_posenc.zoo.t5.T5`.
- :func:`from_keras_hub_deberta_v3`: a keras-hub ``DebertaV3Backbone`` (any keras-hub
  DeBERTa v3 preset) -> the zoo's DeBERTa v3 (`keras_posenc.zoo.deberta.build_deberta_v3`).
- :func:`from_keras_hub_roformer_v2`: a keras-hub ``RoformerV2Backbone`` -> the zoo's
  RoFormer v2 (`keras_posenc.zoo.roformer.build_roformer_v2`).
- :func:`from_keras_hub_swin`: a keras-hub ``SwinTransformerBackbone`` (any keras-hub Swin
  preset) -> the zoo's Swin Transformer (`keras_posenc.zoo.swin.build_swin`).
- :func:`from_keras_hub_decoder`: keras-hub's ``LlamaBackbone``, ``Llama3Backbone``,
  ``MistralBackbone``, ``QwenBackbone``, ``GemmaBackbone`` (Gemma 1 and 2) and
  ``Gemma3Backbone`` (text only) ->
  :class:`~keras_posenc.zoo.decoder_lm.DecoderLM`;
  :func:`from_keras_hub` takes any of these backbones (or a keras-hub ``CausalLM``, its
  tokenizer included); :func:`from_keras_hub_preset` loads a preset (a folder written by
  ``save_to_preset``, offline, or a handle keras-hub downloads) with its tokenizer.
"""

from keras_posenc.convert.fairseq import (
    fairseq_to_posenc_ids,
    from_fairseq_archive,
    from_fairseq_fconv,
    load_fairseq_checkpoint,
    parse_fairseq_layers,
    posenc_to_fairseq_ids,
    read_fairseq_dictionary,
)
from keras_posenc.convert.keras_hub_deberta import from_keras_hub_deberta_v3
from keras_posenc.convert.keras_hub_decoders import (
    from_keras_hub,
    from_keras_hub_decoder,
    from_keras_hub_preset,
)
from keras_posenc.convert.keras_hub_roformer import from_keras_hub_roformer_v2
from keras_posenc.convert.keras_hub_swin import from_keras_hub_swin
from keras_posenc.convert.keras_hub_t5 import from_keras_hub_t5
from keras_posenc.convert.timm import (
    config_from_timm,
    from_timm_coatnet,
    from_timm_maxvit,
    from_timm_maxxvit,
    load_timm_state_dict,
    maxvit_config_from_timm,
    maxxvit_config_from_timm,
    to_timm_state_dict,
)

__all__ = [
    "config_from_timm",
    "fairseq_to_posenc_ids",
    "from_fairseq_archive",
    "from_fairseq_fconv",
    "from_keras_hub",
    "from_keras_hub_deberta_v3",
    "from_keras_hub_decoder",
    "from_keras_hub_preset",
    "from_keras_hub_roformer_v2",
    "from_keras_hub_swin",
    "from_keras_hub_t5",
    "from_timm_coatnet",
    "from_timm_maxvit",
    "from_timm_maxxvit",
    "load_fairseq_checkpoint",
    "load_timm_state_dict",
    "maxvit_config_from_timm",
    "maxxvit_config_from_timm",
    "parse_fairseq_layers",
    "posenc_to_fairseq_ids",
    "read_fairseq_dictionary",
    "to_timm_state_dict",
]
