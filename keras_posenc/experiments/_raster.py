"""Greyscale figures without an imaging library: a PNG writer, a bitmap font, lines, markers.

The experiments draw their figures on uint8 numpy canvases (255 = white) so
that running a study needs no plotting package.
"""

from __future__ import annotations

import os
import struct
import zlib

import numpy as np


def write_png(path: str | os.PathLike, image: np.ndarray) -> None:
    """Writes a 2D uint8 array as an 8-bit greyscale PNG (no imaging library needed)."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    height, width = image.shape
    raw = b"".join(b"\x00" + image[row].tobytes() for row in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    with open(path, "wb") as handle:
        handle.write(b"\x89PNG\r\n\x1a\n")
        handle.write(chunk(b"IHDR", header))
        handle.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        handle.write(chunk(b"IEND", b""))


# A 5 x 8 bitmap font (rows top to bottom, 5 bits each, as hex bytes) for the
# figure's labels, so the plot needs no imaging library.
_FONT = {
    "a": "00000e010f110f00",
    "b": "10101e1111111e00",
    "c": "00000e1010100e00",
    "d": "01010f1111110f00",
    "e": "00000e111f100e00",
    "f": "06081e0808080800",
    "g": "00000f11110f010e",
    "h": "10101e1111111100",
    "i": "04000c0404040e00",
    "j": "020006020202120c",
    "k": "1010121418141200",
    "l": "0c04040404040e00",
    "m": "00001a1515151500",
    "n": "00001e1111111100",
    "o": "00000e1111110e00",
    "p": "00001e11111e1010",
    "q": "00000f11110f0101",
    "r": "0000161910101000",
    "s": "00000f100e011e00",
    "t": "08081e0808090600",
    "u": "0000111111130d00",
    "v": "00001111110a0400",
    "w": "0000111515150a00",
    "x": "0000110a040a1100",
    "y": "00001111110f010e",
    "z": "00001f0204081f00",
    "0": "0e11131519110e00",
    "1": "040c040404040e00",
    "2": "0e11010204081f00",
    "3": "1f02040201110e00",
    "4": "02060a121f020200",
    "5": "1f101e0101110e00",
    "6": "0608101e11110e00",
    "7": "1f01020408080800",
    "8": "0e11110e11110e00",
    "9": "0e11110f01020c00",
    "_": "000000000000001f",
    ".": "00000000000c0c00",
    ",": "00000000000c0408",
    "-": "0000001f00000000",
    "+": "0004041f04040000",
    "=": "00001f001f000000",
    "/": "0102020408081000",
    "(": "0204080808040200",
    ")": "0804020202040800",
    ":": "000c0c000c0c0000",
    "L": "1010101010101f00",
    # The capitals of PosENet's target names (H, V, G, HS, VS).
    "G": "0e11101711110f00",
    "H": "1111111f11111100",
    "S": "0f10100e01011e00",
    "V": "11111111110a0400",
    "?": "0e11010204000400",
    " ": "0000000000000000",
}
GLYPH_WIDTH, GLYPH_HEIGHT = 6, 8  # with one column of spacing


def draw_text(canvas: np.ndarray, x: int, y: int, text: str, colour: int) -> None:
    """Draws ``text`` with its top-left corner at ``(x, y)``; unknown characters as '?'."""
    for index, char in enumerate(text):
        glyph = _FONT.get(char, _FONT["?"])
        for row in range(GLYPH_HEIGHT):
            bits = int(glyph[2 * row : 2 * row + 2], 16)
            for col in range(5):
                if bits & (1 << (4 - col)):
                    px, py = x + index * GLYPH_WIDTH + col, y + row
                    if 0 <= py < canvas.shape[0] and 0 <= px < canvas.shape[1]:
                        canvas[py, px] = colour


def draw_line(
    canvas: np.ndarray, start: tuple, end: tuple, colour: int, dash: int = 0, width: int = 1
) -> None:
    """A straight line of ``width`` pixels; ``dash`` > 0 draws dashes of that many pixels."""
    (x0, y0), (x1, y1) = start, end
    steps = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
    xs = np.rint(np.linspace(x0, x1, steps)).astype(int)
    ys = np.rint(np.linspace(y0, y1, steps)).astype(int)
    if dash:
        keep = (np.arange(steps) // dash) % 2 == 0
        xs, ys = xs[keep], ys[keep]
    for offset in range(width):
        shift = offset - width // 2
        vertical = abs(x1 - x0) < abs(y1 - y0)
        px, py = (xs + shift, ys) if vertical else (xs, ys + shift)
        inside = (py >= 0) & (py < canvas.shape[0]) & (px >= 0) & (px < canvas.shape[1])
        canvas[py[inside], px[inside]] = colour


def draw_marker(canvas: np.ndarray, x: int, y: int, shade: int, filled: bool) -> None:
    """A 5 x 5 square, filled or hollow (white inside)."""
    canvas[y - 2 : y + 3, x - 2 : x + 3] = shade
    if not filled:
        canvas[y - 1 : y + 2, x - 1 : x + 2] = 255
