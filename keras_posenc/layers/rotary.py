"""Rotary position embeddings (RoPE) and their scaled variants, as one description.

`RotaryPositions` says how queries and keys are rotated by their absolute
positions (Su et al.'s RoPE), how the rotation is stretched for sequences
longer than the training length (position interpolation, NTK-aware and
dynamic NTK base scaling, YaRN, Llama 3.1's scaling, LongRoPE), which
dimensions turn (all or a leading part; pairs split in halves or
interleaved), and whether xPos' decay is applied on top. It holds no weights
and is not a layer: an attention layer takes one (as ``rotary=``) and calls
`RotaryPositions.rotate` on its projected queries and keys. The frequency
formulas are in keras_posenc/layers/_rotary_frequencies.py.

Examples:

    >>> import numpy as np
    >>> from keras_posenc.layers.rotary import RotaryPositions
    >>> rope = RotaryPositions(scaling="yarn", scaling_factor=4.0, training_length=2048)
    >>> rope
    RotaryPositions(scaling='yarn', scaling_factor=4.0, training_length=2048)
    >>> x = np.ones((1, 3, 2, 8), "float32")  # (batch, sequence, heads, head_dim)
    >>> tuple(rope.rotate(x, 5, role="key").shape)
    (1, 3, 2, 8)
    >>> rope.dynamic, rope.causal_only, round(rope.attention_factor(), 4)
    (False, False, 1.1386)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc._quiet import quiet_import
from keras_posenc.layers import _rotary_frequencies as formulas
from keras_posenc.layers._checks import check_choice, check_int, shape_of
from keras_posenc.layers._description import Description
from keras_posenc.layers._rotary_arguments import DEFAULTS, check_arguments

__all__ = ["RotaryPositions"]

# Computed by keras_hub's RotaryEmbedding with the same numbers (`_keras_hub_rotation`), with
# half-split pairs; the others rotate by frequencies keras_hub cannot express (`_turn`).
_DELEGATED = (None, "linear", "ntk")

# Scalings whose frequencies depend on the current length: a cache holds keys before rotation.
_DYNAMIC = ("dynamic_ntk", "longrope")

# xPos' gamma (torchscale's ``XPOS``: ``scale = (arange(0, d, 2) + 0.4 d) / (1.4 d)``).
_XPOS_GAMMA = 0.4


@keras.saving.register_keras_serializable(package="keras_posenc")
class RotaryPositions(Description):
    """Rotary position embeddings (RoPE) with optional scaling and xPos decay.

    The query and key at position ``m`` are rotated pair by pair: pair ``k``
    (of ``d / 2``, ``d`` the rotary dimension) is turned by the angle
    ``m * theta_k``, ``theta_k = max_wavelength ** (-2k / d)``, so the dot
    product of a query at ``m`` and a key at ``n`` depends on ``m - n`` only.
    By default pairs follow keras_hub's ``RotaryEmbedding`` and Llama
    ("rotate half": pair ``k`` is dimensions ``k`` and ``k + d / 2``), so
    models saved with keras_hub's rotation keep their numbers;
    ``interleaved=True`` pairs ``2k`` and ``2k + 1`` (RoFormer, GPT-J).
    ``partial_rotary_factor`` below 1 turns only the leading
    ``d = int(head_dim * partial_rotary_factor)`` dimensions of each head
    (GPT-NeoX's ``rotary_pct``, Phi's ``partial_rotary_factor``; Hugging
    Face's rounding) and passes the rest through; every formula here then
    reads that ``d``. The ``scaling`` stretches the rotation for sequences
    longer than those seen in training (``s`` is ``scaling_factor``,
    ``L`` is ``training_length``):

    - ``None``: plain RoPE.
    - ``"linear"`` (position interpolation, Chen et al.): positions ``m / s``.
    - ``"ntk"`` (NTK-aware, bloc97): the base becomes
      ``max_wavelength * s ** (d / (d - 2))``, positions unchanged: the
      highest frequency stays, the lowest is divided by ``s``.
    - ``"dynamic_ntk"``: ``"ntk"`` with
      ``s' = max(1, s * length / L - (s - 1))`` recomputed at every call
      from its ``length`` (the current sequence length): plain RoPE up to
      ``L``, then ``length / L`` with ``s = 1`` (bloc97's form), Hugging
      Face's ``_compute_dynamic_ntk_parameters`` with its ``factor = s``.
    - ``"yarn"`` (YaRN, Peng et al., "NTK-by-parts" with an attention
      temperature): pair ``k`` turns ``r_k = L theta_k / (2 pi)`` times in
      the training length; a ramp ``gamma_k`` (1 keeps the pair, 0
      interpolates it) gives ``theta'_k = (1 - gamma_k) theta_k / s +
      gamma_k theta_k``: pairs that turn many times keep their frequency,
      those that turn less than once are interpolated. The ramp follows
      ``yarn_convention``:

      - ``"released"`` (default): the released YaRN code, as Hugging Face's
        ``_compute_yarn_parameters`` (and keras_hub's
        ``rope_type="yarn"``) compute it: linear in the pair *index* ``k``
        between the fractional indices where ``r_k = yarn_beta``
        (``beta_fast``, 32) and ``r_k = yarn_alpha`` (``beta_slow``, 1),
        rounded down and up with ``yarn_truncate`` and clamped to
        ``[0, d - 1]``;
      - ``"paper"``: the paper's formula, linear in ``r_k``:
        ``gamma_k = clip((r_k - alpha) / (beta - alpha), 0, 1)``.

      The default is the released one because checkpoints were trained
      with it: a released YaRN model converted here computes its own
      positions (at head size 128, ``L = 4096``, ``s = 8`` the two differ on
      25 of 64 pairs, by up to 130%). No release of this library has used
      the paper's default, so the change breaks no saved model.
      Queries and keys (their turned dimensions) are each multiplied by the
      attention factor: ``attention_factor`` if given, else
      ``0.1 ln(s) + 1`` (1 for ``s = 1``), or with ``yarn_mscale`` and
      ``yarn_mscale_all_dim`` (DeepSeek's) ``(0.1 mscale ln(s) + 1) /
      (0.1 mscale_all_dim ln(s) + 1)``; the logits by its square.
    - ``"llama3"`` (Llama 3.1): wavelengths ``2 pi / theta_k`` longer than
      ``L / low_freq_factor`` are divided by ``s``, those shorter than
      ``L / high_freq_factor`` kept, between them the paper-YaRN ramp in
      ``r_k`` from ``low_freq_factor`` to ``high_freq_factor``; no
      attention factor (Hugging Face's ``_compute_llama3_parameters``;
      keras_hub's ``Llama3Backbone`` with ``rope_frequency_adjustment_factor=s``,
      ``rope_pretraining_sequence_length=L``).
    - ``"longrope"`` (LongRoPE, Phi-3): per pair ``theta_k / lambda_k``, the
      ``lambda_k`` ``long_factor`` once the current length exceeds ``L``,
      else ``short_factor`` (one positive number per pair, searched for each
      model and published with it); queries and keys times
      ``attention_factor`` if given, else ``sqrt(1 + ln(s) / ln(L))`` (1 for
      ``s = 1``; ``s`` is the extended over the original length), whatever
      the length (Hugging Face's ``_compute_longrope_parameters``). Like
      dynamic NTK, it reads ``length``.

    With ``"dynamic_ntk"`` and ``"longrope"`` keys rotated at one length are
    wrong at another: `dynamic` is True, and an attention layer keeps its
    cache of keys *before* the rotation and rotates all of them at every
    step, so cached decoding equals the full pass over each prefix.

    xPos (Sun et al.; ``xpos_scale_base``, 512 in the paper) multiplies the
    turned pair ``k`` of a query at position ``n`` by
    ``zeta_k ** ((n - c) / scale_base)`` and of a key at ``m`` by
    ``zeta_k ** ((c - m) / scale_base)``, ``zeta_k = (2k / d + 0.4) / 1.4 <
    1``, so the logit of pair ``k`` decays as ``zeta_k ** ((n - m) /
    scale_base)`` whatever the centre ``c``. That is a decay only for ``n >=
    m``: use it under a causal mask (`causal_only`). It combines with every
    scaling (it acts after the rotation). The centre is where the range is
    spent: each factor alone grows as ``exp(1.25 |position - c| /
    scale_base)`` (``zeta_0 = 2 / 7``), past float32's range beyond about
    ``70 * scale_base`` (36,000 positions at 512) and float16's beyond
    about ``8.8 * scale_base`` (4,500). `rotate` takes the span of
    queries a call attends with (``query_span``): ``c`` is its middle and
    keys after its last query (hidden from all of them by the causal mask)
    take the last query's factor, so a cached step (one query, ``c = n``)
    has factors of at most 1 at any position, and a full pass of ``T``
    tokens factors within ``exp(0.63 T / scale_base)``. Without a span
    ``c = 0``, torchscale's positions uncentred. Keys are cached turned but
    without their xPos factors, which depend on the call's centre.

    All computation is in float32; `rotate` returns its input's dtype.
    `frequencies` and `attention_factor` give a scheme's ``theta'_k`` and
    factor.

    Against keras_hub's ``RotaryEmbedding`` (0.32): ``None``, ``"linear"`` and
    ``"ntk"`` are computed by it (``"ntk"`` as plain RoPE with the scaled
    base), always in float32, with half-split pairs. Its ``rope_type="yarn"``
    is the released YaRN (``yarn_convention="released"``: the same
    frequencies and temperature; it takes no ``attention_factor`` or mscale,
    and where the clamped bounds cross, below a training length of
    ``2 pi beta_slow``, it widens the ramp to 0.001 where Hugging Face's
    code leaves it reversed). Its ``rope_type="dynamic"`` is not dynamic NTK
    (nor NTK-aware): it divides *every* frequency by the fixed
    ``scaling_factor ** (d / (d - 2))``, i.e. position interpolation by that
    factor, where NTK-aware scaling divides ``theta_k`` by
    ``s ** (2k / (d - 2))`` (pair 0 unchanged), and it never reads the
    sequence length. So ``"yarn"``, ``"dynamic_ntk"``, ``"llama3"`` and
    ``"longrope"`` are computed here.

    Args:
        max_wavelength: the base of the frequencies (10000 in RoFormer,
            Hugging Face's ``rope_theta``), a positive number.
        scaling: ``None`` (default), ``"linear"``, ``"ntk"``,
            ``"dynamic_ntk"``, ``"yarn"``, ``"llama3"`` or ``"longrope"``.
        scaling_factor: ``s`` (Hugging Face's ``factor``: usually the target
            length over the training length), a finite number ``>= 1``;
            ``1.0`` (default) leaves ``"linear"``, ``"ntk"``, ``"yarn"`` and
            ``"llama3"`` unscaled.
        training_length: ``L``, the sequence length the model was trained
            at (``original_max_position_embeddings``), an integer ``>= 1``
            (``>= 2`` for ``"longrope"``); needed by ``"dynamic_ntk"``,
            ``"yarn"``, ``"llama3"`` and ``"longrope"``.
        yarn_convention: ``"released"`` (default) or ``"paper"``, as above.
        yarn_alpha: YaRN's ``alpha`` (``beta_slow``; default 1), a positive
            number.
        yarn_beta: YaRN's ``beta`` (``beta_fast``; default 32), larger than
            ``yarn_alpha``.
        yarn_truncate: the released ramp's rounding of its bounds to whole
            pairs (default True, Hugging Face's ``truncate``).
        yarn_mscale: ``None`` (default) or a positive number, given together
            with ``yarn_mscale_all_dim``: the attention factor's ratio above.
        yarn_mscale_all_dim: ``None`` (default) or a positive number, given
            together with ``yarn_mscale``.
        attention_factor: ``None`` (default: the scaling's own) or a positive
            number that replaces the factor of ``"yarn"`` or ``"longrope"``.
        low_freq_factor: ``"llama3"``'s low-frequency factor (default 1,
            Llama 3.1's), ``0 < low_freq_factor < high_freq_factor``.
        high_freq_factor: ``"llama3"``'s high-frequency factor (default 4,
            Llama 3.1's).
        short_factor: ``"longrope"``'s ``lambda`` up to the original length
            (needed): a sequence of ``d / 2`` positive numbers.
        long_factor: ``"longrope"``'s ``lambda`` beyond it (needed): a sequence
            of ``d / 2`` positive numbers.
        partial_rotary_factor: the fraction of each head that turns, in
            ``(0, 1]`` (default 1).
        interleaved: pairs ``(2k, 2k + 1)`` instead of ``(k, k + d / 2)``
            (default False).
        xpos_scale_base: ``None`` (default) for no decay, else xPos'
            ``scale_base`` (512 in the paper), a positive number.

    An argument that the chosen ``scaling`` does not read (``scaling_factor``
    with ``None``; ``training_length`` with ``None``, ``"linear"`` or
    ``"ntk"``; the ``yarn_*`` arguments without ``"yarn"``, ``yarn_truncate``
    with the paper's convention; ``attention_factor`` but with ``"yarn"`` or
    ``"longrope"``; the frequency factors but with ``"llama3"``; the
    LongRoPE factors but with ``"longrope"``) must keep its default: a value
    that would be ignored raises a ``ValueError``, as do the values out of
    range; a wrong ``scaling`` too. A head size whose rotary dimension is odd,
    or whose pairs do not match the LongRoPE factors, is refused by
    `check_head_dim` (and `rotate`).

    Examples:

        Plain RoPE turns pair 0 (dimensions 0 and ``d / 2``) by one radian per
        position:

        >>> import numpy as np
        >>> from keras import ops
        >>> from keras_posenc.layers.rotary import RotaryPositions
        >>> x = np.array([1.0, 0.0], "float32").reshape(1, 1, 1, 2)
        >>> print(np.round(ops.convert_to_numpy(RotaryPositions().rotate(x, 1))[0, 0, 0], 4))
        [0.5403 0.8415]

        The logit of a query at ``m`` and a key at ``n`` depends on ``m - n``:

        >>> rope = RotaryPositions(scaling="ntk", scaling_factor=4.0)
        >>> q, k = np.ones((1, 1, 1, 8), "float32"), np.ones((1, 1, 1, 8), "float32")
        >>> def logit(m, n):
        ...     rotated_q = ops.convert_to_numpy(rope.rotate(q, m))
        ...     rotated_k = ops.convert_to_numpy(rope.rotate(k, n, role="key"))
        ...     return float(np.sum(rotated_q * rotated_k))
        >>> bool(np.isclose(logit(7, 3), logit(104, 100), atol=1e-4))
        True

        Llama 3.1's scaling (head size 128, base 500000): the fastest pair is
        kept, the slowest divided by 8:

        >>> llama = RotaryPositions(
        ...     max_wavelength=500000.0, scaling="llama3", scaling_factor=8.0,
        ...     training_length=8192)
        >>> theta = ops.convert_to_numpy(llama.frequencies(128))
        >>> plain = ops.convert_to_numpy(RotaryPositions(max_wavelength=500000.0).frequencies(128))
        >>> print(np.round(theta[[0, -1]] / plain[[0, -1]], 4))
        [1.    0.125]
        >>> RotaryPositions(partial_rotary_factor=0.25).rotary_dim(64)
        16
        >>> RotaryPositions(scaling="dynamic_ntk", training_length=512).dynamic
        True
        >>> RotaryPositions(xpos_scale_base=512).causal_only
        True

    References:
        - [Su et al., 2021. RoFormer: Enhanced Transformer with Rotary Position
          Embedding](https://arxiv.org/abs/2104.09864)
        - [Chen et al., 2023. Extending Context Window of Large Language Models
          via Positional Interpolation](https://arxiv.org/abs/2306.15595)
        - bloc97, 2023. "NTK-Aware Scaled RoPE" (a Reddit post, no paper) and
          its dynamic variant.
        - [Peng et al., 2023. YaRN: Efficient Context Window Extension of Large
          Language Models](https://arxiv.org/abs/2309.00071)
        - [Ding et al., 2024. LongRoPE: Extending LLM Context Window Beyond 2
          Million Tokens](https://arxiv.org/abs/2402.13753)
        - Meta, 2024. The Llama 3 Herd of Models (Llama 3.1's RoPE scaling:
          its released code, as Hugging Face's ``_compute_llama3_parameters``).
        - [Sun et al., 2022. A Length-Extrapolatable
          Transformer](https://arxiv.org/abs/2212.10554) (xPos; reference code:
          microsoft/torchscale)
    """

    def __init__(
        self,
        max_wavelength: float = 10000.0,
        scaling: str | None = None,
        scaling_factor: float = 1.0,
        training_length: int | None = None,
        yarn_convention: str = "released",
        yarn_alpha: float = 1.0,
        yarn_beta: float = 32.0,
        yarn_truncate: bool = True,
        yarn_mscale: float | None = None,
        yarn_mscale_all_dim: float | None = None,
        attention_factor: float | None = None,
        low_freq_factor: float = 1.0,
        high_freq_factor: float = 4.0,
        short_factor: Sequence[float] | None = None,
        long_factor: Sequence[float] | None = None,
        partial_rotary_factor: float = 1.0,
        interleaved: bool = False,
        xpos_scale_base: float | None = None,
    ) -> None:
        arguments = dict(locals())
        del arguments["self"]
        self._arguments = check_arguments(type(self).__name__, arguments)
        for name, value in self._arguments.items():
            if name != "attention_factor":  # the method's name; the config holds the argument
                setattr(self, name, value)
        # keras_hub layers by rotary dimension (they hold no weights; kept to not rebuild
        # one per call in an eager decoding loop).
        self._keras_hub_layers: dict[int, Any] = {}

    @property
    def dynamic(self) -> bool:
        """Whether the rotation depends on the current length (``"dynamic_ntk"``,
        ``"longrope"``): a cache must then hold keys before the rotation."""
        return self.scaling in _DYNAMIC

    @property
    def causal_only(self) -> bool:
        """Whether xPos is on: its factors decay only for keys at or before the query."""
        return self.xpos_scale_base is not None

    def rotary_dim(self, head_dim: int) -> int:
        """The number of leading dimensions of a head of ``head_dim`` that turn."""
        return int(head_dim * self.partial_rotary_factor)

    def check_head_dim(self, caller: str, head_dim: int) -> None:
        """Raises (naming ``caller``) unless a head of ``head_dim`` can be rotated: its rotary
        dimension even and >= 2, and as many pairs as the LongRoPE factors."""
        check_int(caller, "key_dim", head_dim, 1)
        rotary_dim = self.rotary_dim(head_dim)
        if self.partial_rotary_factor == 1.0:
            if head_dim % 2:
                raise ValueError(
                    f"{caller}: rotary embeddings need an even `key_dim`, got {head_dim}."
                )
        elif rotary_dim < 2 or rotary_dim % 2:
            raise ValueError(
                f"{caller}: the rotary dimension int(key_dim * partial_rotary_factor) must be "
                f"an even integer >= 2, got int({head_dim} * {self.partial_rotary_factor}) = "
                f"{rotary_dim}."
            )
        for name in ("short_factor", "long_factor"):
            factors = getattr(self, name)
            if factors is not None and len(factors) != rotary_dim // 2:
                raise ValueError(
                    f"{caller}: `{name}` must hold one factor per pair of the rotary "
                    f"dimension ({rotary_dim // 2} for key_dim={head_dim}), got {len(factors)}."
                )

    def frequencies(self, head_dim: int, length: Any = None) -> Any:
        """The float32 angular frequencies ``theta'_k`` of the ``rotary_dim(head_dim) / 2``
        pairs (radians per position; position interpolation's ``1 / s`` included).

        Args:
            head_dim: the size of each head.
            length: the current sequence length (an int or int scalar tensor); needed
                by the `dynamic` scalings, ignored by the others.

        Returns:
            A float32 tensor of shape ``(rotary_dim / 2,)``.
        """
        caller = f"{type(self).__name__}.frequencies"
        self.check_head_dim(caller, head_dim)
        self._check_length(caller, length)
        return self._frequencies(self.rotary_dim(head_dim), length)

    def attention_factor(self) -> float:
        """The factor on the turned dimensions of queries and keys (the logits get its
        square): YaRN's temperature, LongRoPE's factor, 1.0 for the other scalings."""
        given = self._arguments["attention_factor"]
        if given is not None:
            return given
        s = self.scaling_factor
        if self.scaling == "yarn":
            if self.yarn_mscale is not None:
                return formulas.yarn_mscale(s, self.yarn_mscale) / formulas.yarn_mscale(
                    s, self.yarn_mscale_all_dim
                )
            return formulas.yarn_mscale(s)
        if self.scaling == "longrope":
            return formulas.longrope_attention_factor(s, self.training_length)
        return 1.0

    def rotate(
        self,
        x: Any,
        positions: Any,
        role: str = "query",
        length: Any = None,
        query_span: tuple | None = None,
        xpos: bool = True,
    ) -> Any:
        """``x`` rotated by its rows' positions (and scaled by the attention factor and xPos').

        Args:
            x: ``(batch, sequence, heads, head_dim)``, any float dtype,
                ``head_dim`` known; the sequence length may be unknown.
            positions: the absolute position of each row of ``x`` along axis
                1: an int or int scalar tensor ``start`` (rows at ``start ..
                start + sequence - 1``; the cache index when decoding), or a
                1-D int tensor of ``sequence`` positions.
            role: ``"query"`` or ``"key"`` (only xPos treats them differently).
            length: the current sequence length (an int or int scalar
                tensor): the number of keys attended to, cached ones included.
                Read by the `dynamic` scalings only, which need it.
            query_span: with xPos, ``(first, last)``: the positions (ints or int
                scalar tensors) of the first and last query of the call these
                rows take part in; the factors are centred on its middle and
                keys after ``last`` take ``last``'s (see the class docstring).
                Queries and keys of one call must be given the same span.
                ``None``: centred on position 0.
            xpos: False leaves xPos' factors out (what an attention caches);
                `xpos_factors` gives them.

        Returns:
            A tensor of ``x``'s shape and dtype, computed in float32.
        """
        caller = f"{type(self).__name__}.rotate"
        check_choice(caller, "role", role, ("query", "key"))
        shape = shape_of(x)
        if len(shape) != 4 or shape[-1] is None:
            raise ValueError(
                f"{caller}: `x` must have rank 4 (batch, sequence, heads, head_dim) with a "
                f"known head_dim, got shape {shape}."
            )
        head_dim = int(shape[-1])
        self.check_head_dim(caller, head_dim)
        self._check_length(caller, length)
        start, given_positions = _start_or_positions(caller, positions, shape[1])
        dtype = keras.backend.standardize_dtype(x.dtype)
        x = ops.cast(x, "float32")
        rotary_dim = self.rotary_dim(head_dim)
        turned, passed = x, None
        if rotary_dim < head_dim:
            turned, passed = x[..., :rotary_dim], x[..., rotary_dim:]
        row_positions = _row_positions(turned, start, given_positions)
        if self.scaling in _DELEGATED and not self.interleaved:
            hub = self._keras_hub_rotation(rotary_dim)
            if given_positions is None:
                turned = hub(turned, start_index=start)
            else:
                turned = hub(turned, positions=given_positions)
        else:
            frequencies = self._frequencies(rotary_dim, length)
            turned = _turn(turned, row_positions, frequencies, self.interleaved)
        factor = self.attention_factor()
        if factor != 1.0:
            turned = turned * factor
        if xpos and self.xpos_scale_base is not None:
            turned = turned * self._xpos_factors(row_positions, rotary_dim, role, query_span)
        if passed is not None:
            turned = ops.concatenate([turned, passed], axis=-1)
        return ops.cast(turned, dtype)

    def rotate_for_attention(
        self, q: Any, k: Any, offset: Any, length: Any, cache: Any = None
    ) -> tuple:
        """An attention call's projected queries and keys, rotated: ``(q, k, q_turned)``.

        ``q`` holds the call's queries at ``offset ..``; ``k`` every key from position 0 (with
        a ``cache``, the cache's keys: turned when written by ``rotate(..., xpos=False)``,
        unless `dynamic`, whose cache holds them before the rotation). xPos' factors are
        centred on the call's queries, so neither side leaves its dtype's range at any
        position (the class docstring). ``q_turned`` is ``q`` without xPos' factor (the factor
        centred on each query itself, i.e. 1): what a term that reads the query alone, such as
        relative keys, should read, since it then does not depend on the call's span.
        """
        query_length = ops.shape(q)[1]
        span = (offset, offset + query_length - 1)
        q = self.rotate(q, offset, "query", length, query_span=span, xpos=False)
        if cache is None or self.dynamic:
            k = self.rotate(k, 0, "key", length, query_span=span)
        elif self.causal_only:
            factors = self.xpos_factors((0, ops.shape(k)[1]), ops.shape(k)[-1], "key", span)
            k = k * ops.cast(factors, k.dtype)
        if not self.causal_only:
            return q, k, q
        factors = self.xpos_factors((offset, query_length), ops.shape(q)[-1], "query", span)
        return q * ops.cast(factors, q.dtype), k, q

    def xpos_factors(
        self, positions: Any, head_dim: int, role: str, query_span: tuple | None = None
    ) -> Any:
        """The float32 factors that `rotate` multiplies rows at ``positions`` by with xPos,
        ``(1, sequence, 1, head_dim)`` (1 on the dimensions that do not turn; all 1 without
        xPos): an attention multiplies its cached keys (turned, without them) by these.

        Args:
            positions: an int or int scalar tensor ``start`` with the ``sequence``
                given as ``(start, sequence)``, or a 1-D int tensor of positions.
            head_dim: the size of each head.
            role: ``"query"`` or ``"key"``.
            query_span: as in `rotate`.
        """
        caller = f"{type(self).__name__}.xpos_factors"
        check_choice(caller, "role", role, ("query", "key"))
        self.check_head_dim(caller, head_dim)
        if isinstance(positions, tuple):
            start, sequence = positions
            rows = ops.arange(sequence, dtype="float32") + ops.cast(start, "float32")
        else:
            rows = ops.cast(positions, "float32")
        rotary_dim = self.rotary_dim(head_dim)
        if self.xpos_scale_base is None:
            factors = ops.ones_like(ops.expand_dims(rows, -1)) * ops.ones((rotary_dim,))
            factors = ops.expand_dims(ops.expand_dims(factors, 0), 2)
        else:
            factors = self._xpos_factors(rows, rotary_dim, role, query_span)
        if rotary_dim < head_dim:
            ones = ops.ones_like(factors[..., :1]) * ops.ones((head_dim - rotary_dim,))
            factors = ops.concatenate([factors, ones], axis=-1)
        return factors

    def _check_length(self, caller: str, length: Any) -> None:
        if self.dynamic and length is None:
            raise ValueError(
                f"{caller}: scaling={self.scaling!r} needs `length` (the current sequence "
                "length, an int or int scalar tensor)."
            )

    def _keras_hub_rotation(self, rotary_dim: int) -> Any:
        """keras_hub's ``RotaryEmbedding`` computing this scaling (None, linear, ntk)."""
        layer = self._keras_hub_layers.get(rotary_dim)
        if layer is None:
            keras_hub = quiet_import("keras_hub")  # imports TensorFlow: only when needed

            base, factor = self.max_wavelength, 1.0
            if self.scaling == "linear":
                factor = self.scaling_factor
            elif self.scaling == "ntk":
                base = formulas.ntk_base(self.max_wavelength, self.scaling_factor, rotary_dim)
            layer = keras_hub.layers.RotaryEmbedding(
                max_wavelength=base, scaling_factor=factor, dtype="float32"
            )
            self._keras_hub_layers[rotary_dim] = layer
        return layer

    def _frequencies(self, rotary_dim: int, length: Any) -> Any:
        """float32 ``theta'_k``, ``(rotary_dim // 2,)``."""
        base, s = self.max_wavelength, self.scaling_factor
        if self.scaling == "dynamic_ntk":
            return formulas.dynamic_ntk(base, rotary_dim, s, self.training_length, length)
        if self.scaling == "longrope":
            return formulas.longrope(
                base,
                rotary_dim,
                self.short_factor,
                self.long_factor,
                self.training_length,
                length,
            )
        if self.scaling == "ntk":
            return formulas.base_frequencies(formulas.ntk_base(base, s, rotary_dim), rotary_dim)
        if self.scaling == "yarn" and self.yarn_convention == "released":
            return formulas.yarn_released(
                base,
                rotary_dim,
                s,
                self.training_length,
                self.yarn_beta,
                self.yarn_alpha,
                self.yarn_truncate,
            )
        theta = formulas.base_frequencies(base, rotary_dim)
        if self.scaling == "yarn":  # the paper's
            return formulas.ramped(theta, s, self.training_length, self.yarn_alpha, self.yarn_beta)
        if self.scaling == "llama3":
            low, high = self.low_freq_factor, self.high_freq_factor
            return formulas.ramped(theta, s, self.training_length, low, high)
        return theta / s if self.scaling == "linear" else theta

    def _xpos_factors(
        self, row_positions: Any, rotary_dim: int, role: str, query_span: tuple | None
    ) -> Any:
        """``zeta_k ** (±(position - c) / scale_base)``, ``(1, sequence, 1, rotary_dim)``."""
        zeta = (ops.arange(0, rotary_dim, 2, dtype="float32") / rotary_dim + _XPOS_GAMMA) / (
            1.0 + _XPOS_GAMMA
        )
        if query_span is None:
            offsets = row_positions
        else:
            first, last = (ops.cast(end, "float32") for end in query_span)
            if role == "key":  # keys after the last query are hidden from every query
                row_positions = ops.minimum(row_positions, last)
            offsets = row_positions - (first + last) / 2.0
        sign = 1.0 if role == "query" else -1.0
        exponent = ops.expand_dims(offsets * (sign / self.xpos_scale_base), -1)
        factors = ops.exp(exponent * ops.expand_dims(ops.log(zeta), 0))  # (sequence, d / 2)
        factors = _pair_layout(factors, self.interleaved)
        return ops.expand_dims(ops.expand_dims(factors, 0), 2)

    def __getstate__(self) -> dict:
        # A copy or pickle is rebuilt from the arguments; the keras_hub layers are a cache.
        state = dict(self.__dict__)
        state["_keras_hub_layers"] = {}
        return state

    def __repr__(self) -> str:
        # The arguments that differ from the defaults: enough to rebuild it, and short.
        arguments = ", ".join(
            f"{name}={value!r}"
            for name, value in self._arguments.items()
            if value != DEFAULTS[name]
        )
        return f"{type(self).__name__}({arguments})"


def _start_or_positions(caller: str, positions: Any, sequence: int | None) -> tuple[Any, Any]:
    """``(start, None)`` for an int or int scalar tensor, ``(0, positions)`` for a 1-D one."""
    if isinstance(positions, int | np.integer) and not isinstance(positions, bool | np.bool_):
        return check_int(caller, "positions", positions, 0), None
    dtype = getattr(positions, "dtype", None)
    if dtype is None or "int" not in keras.backend.standardize_dtype(dtype):
        raise TypeError(
            f"{caller}: `positions` must be an int, an int scalar tensor or a 1-D int tensor, "
            f"got {positions!r}."
        )
    shape = shape_of(positions)
    if len(shape) == 0:
        return positions, None
    if len(shape) == 1 and (shape[0] is None or sequence is None or shape[0] == sequence):
        return 0, positions
    raise ValueError(
        f"{caller}: `positions` must be a scalar (the first row's position) or 1-D with one "
        f"position per row of `x` ({sequence}), got shape {shape}."
    )


def _row_positions(x: Any, start: Any, given_positions: Any) -> Any:
    """float32 position of each row of ``x`` (axis 1)."""
    if given_positions is not None:
        return ops.cast(given_positions, "float32")
    return ops.arange(ops.shape(x)[1], dtype="float32") + ops.cast(start, "float32")


def _pair_layout(per_pair: Any, interleaved: bool) -> Any:
    """``(..., d / 2)`` values of the pairs spread over their ``d`` dimensions: ``k`` and
    ``k + d / 2`` (half split), or ``2k`` and ``2k + 1`` (interleaved)."""
    if not interleaved:
        return ops.concatenate([per_pair, per_pair], axis=-1)
    return ops.repeat(per_pair, 2, axis=-1)


def _turn(x: Any, row_positions: Any, frequencies: Any, interleaved: bool) -> Any:
    """float32 ``x`` turned pair by pair by ``position * theta_k``."""
    angles = ops.expand_dims(row_positions, -1) * ops.expand_dims(frequencies, 0)
    cos = ops.expand_dims(ops.expand_dims(ops.cos(angles), 0), 2)  # (1, sequence, 1, d / 2)
    sin = ops.expand_dims(ops.expand_dims(ops.sin(angles), 0), 2)
    if not interleaved:
        x1, x2 = ops.split(x, 2, axis=-1)
        return ops.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    first, second = x[..., 0::2], x[..., 1::2]
    turned = ops.stack([first * cos - second * sin, second * cos + first * sin], axis=-1)
    return ops.reshape(turned, ops.shape(x))
