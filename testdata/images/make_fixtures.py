#!/usr/bin/python3
"""Generates the image-decoder fixtures and expected.json from Pillow (run with /usr/bin/python3).

Deterministic: content comes from ../qwen-vl/images/p01_photo_grace_hopper.jpg or from numpy with a
fixed seed, and every encoder is called with fixed settings. expected.json holds, per file, what
Pillow 9.4 gives: size and sha256 of np.asarray(Image.open(f).convert("RGB")), and where relevant of
ImageOps.exif_transpose(...) and of im.draft("RGB", (w//d, h//d)).
"""
import ctypes
import hashlib
import io
import json
import os
import struct
import zlib

import numpy as np
import PIL
from PIL import Image, ImageOps

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..", "qwen-vl", "images", "p01_photo_grace_hopper.jpg")
OUT = HERE


def path(name):
    return os.path.join(OUT, name)


def sha(im):
    return hashlib.sha256(np.ascontiguousarray(np.asarray(im.convert("RGB"))).tobytes()).hexdigest()


def photo(w, h, box=(96, 60, 416, 460)):
    return Image.open(SOURCE).convert("RGB").crop(box).resize((w, h), Image.Resampling.BICUBIC)


def exif_app1(orientation, big_endian):
    e = ">" if big_endian else "<"
    head = (b"MM" if big_endian else b"II") + struct.pack(e + "HI", 42, 8)
    ifd = struct.pack(e + "H", 2)
    ifd += struct.pack(e + "HHI", 0x010F, 2, 4) + b"cam\0"          # Make, ASCII inline
    ifd += struct.pack(e + "HHIH", 0x0112, 3, 1, orientation) + b"\0\0"
    ifd += struct.pack(e + "I", 0)
    return b"Exif\0\0" + head + ifd


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def ycck_jpeg(cmyk, quality=90):
    """A 4-component Adobe JPEG with transform 2 (YCCK), written by libturbojpeg's tjCompress2."""
    tj = ctypes.CDLL("libturbojpeg.so.0")
    tj.tjInitCompress.restype = ctypes.c_void_p
    tj.tjCompress2.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_ulong), ctypes.c_int, ctypes.c_int,
                               ctypes.c_int]
    tj.tjFree.argtypes = [ctypes.c_void_p]
    tj.tjDestroy.argtypes = [ctypes.c_void_p]
    h = tj.tjInitCompress()
    buf, size = ctypes.c_void_p(), ctypes.c_ulong()
    height, width = cmyk.shape[:2]
    TJPF_CMYK, TJSAMP_420 = 11, 2
    rc = tj.tjCompress2(h, cmyk.tobytes(), width, 0, height, TJPF_CMYK, ctypes.byref(buf), ctypes.byref(size),
                        TJSAMP_420, quality, 0)
    assert rc == 0
    data = ctypes.string_at(buf, size.value)
    tj.tjFree(buf)
    tj.tjDestroy(h)
    return data


def libwebp_rgb_matches_pillow(name):
    """libwebp's WebPDecodeRGB (what Stoker calls) equals the RGB of its WebPDecodeRGBA (what Pillow's WebPAnimDecoder
    gives: non-premultiplied, fancy upsampling) and Pillow's convert("RGB"), byte for byte."""
    webp = ctypes.CDLL("libwebp.so.7")
    data = open(path(name), "rb").read()
    w, h = ctypes.c_int(), ctypes.c_int()
    planes = []
    for fn, channels in (("WebPDecodeRGB", 3), ("WebPDecodeRGBA", 4)):
        f = getattr(webp, fn)
        f.restype = ctypes.c_void_p
        f.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
        ptr = f(data, len(data), ctypes.byref(w), ctypes.byref(h))
        assert ptr, (name, fn)
        px = np.frombuffer(ctypes.string_at(ptr, w.value * h.value * channels), np.uint8).reshape(h.value, w.value, channels)
        webp.WebPFree(ctypes.c_void_p(ptr))
        planes.append(px[..., :3])
    with Image.open(path(name)) as im:
        pillow = np.asarray(im.convert("RGB"))
    assert np.array_equal(planes[0], planes[1]) and np.array_equal(planes[0], pillow), name


def libwebp_version():
    v = ctypes.CDLL("libwebp.so.7").WebPGetDecoderVersion()
    return f"{v >> 16}.{(v >> 8) & 0xFF}.{v & 0xFF}"


entries = {}


def good(name, orientation=None, drafts=(), transpose_drafts=()):
    with Image.open(path(name)) as im:
        e = {"format": im.format, "pil_mode": im.mode, "width": im.size[0], "height": im.size[1], "sha256": sha(im)}
    with Image.open(path(name)) as im:
        o = im.getexif().get(0x0112)
        e["exif_orientation"] = o if o in range(1, 9) else 1
        if orientation is not None:
            assert e["exif_orientation"] == orientation, (name, e["exif_orientation"])
            t = ImageOps.exif_transpose(im)
            e["transposed"] = {"width": t.size[0], "height": t.size[1], "sha256": sha(t)}
    for d in drafts:
        with Image.open(path(name)) as im:
            w, h = im.size
            im.draft("RGB", (w // d, h // d))
            assert im.size == (-(-w // d), -(-h // d)), (name, d, im.size)   # draft picked exactly 1/d
            e.setdefault("draft", {})[str(d)] = {"width": im.size[0], "height": im.size[1], "sha256": sha(im)}
    for d in transpose_drafts:
        with Image.open(path(name)) as im:
            w, h = im.size
            im.draft("RGB", (w // d, h // d))
            t = ImageOps.exif_transpose(im)
            e.setdefault("draft_transposed", {})[str(d)] = {"width": t.size[0], "height": t.size[1], "sha256": sha(t)}
    entries[name] = e


def pillow_reference(name):
    """Pillow's RGB as a lossless PNG, for formats where another decoder may legitimately differ (lossy WebP)."""
    ref = name + ".pillow.png"
    with Image.open(path(name)) as im:
        im.convert("RGB").save(path(ref))
    entries[name]["pillow_rgb_png"] = ref


def bad(name, reason):
    try:
        with Image.open(path(name)) as im:
            im.convert("RGB")
        pillow = "no error"
    except Exception as ex:  # noqa: BLE001 - recording what Pillow says
        pillow = type(ex).__name__ + ": " + str(ex)
    entries[name] = {"bad": True, "reason": reason, "pillow": pillow}


def main():
    assert PIL.__version__ == "9.4.0", PIL.__version__
    for f in os.listdir(OUT):
        if f.split(".")[-1] in ("jpg", "png", "gif", "bmp", "webp", "tif", "txt", "bin"):
            os.remove(path(f))
    rng = np.random.default_rng(20240601)
    base = photo(160, 120)
    odd = photo(203, 157)

    # JPEG: subsamplings, progressive, gray, CMYK (Adobe, inverted), YCCK, odd sizes for DCT scaling.
    base.save(path("jpeg_420_160x120.jpg"), quality=90, subsampling=2)
    base.save(path("jpeg_422_160x120.jpg"), quality=90, subsampling=1)
    base.save(path("jpeg_444_160x120.jpg"), quality=90, subsampling=0)
    base.save(path("jpeg_progressive_160x120.jpg"), quality=85, progressive=True)
    base.convert("L").save(path("jpeg_gray_160x120.jpg"), quality=90)
    base.convert("CMYK").save(path("jpeg_cmyk_adobe_160x120.jpg"), quality=90)
    cmyk = np.asarray(base.convert("CMYK")).copy()
    cmyk[..., 3] = (np.arange(160)[None, :] * 255 // 159).astype(np.uint8)
    with open(path("jpeg_ycck_160x120.jpg"), "wb") as f:
        f.write(ycck_jpeg(cmyk))
    odd.save(path("jpeg_420_203x157.jpg"), quality=92, subsampling=2)
    odd.save(path("jpeg_progressive_203x157.jpg"), quality=92, progressive=True)
    odd.convert("L").save(path("jpeg_gray_203x157.jpg"), quality=92)

    # EXIF orientation 1..8, little- and big-endian TIFF headers; one progressive.
    small = photo(48, 32)
    for o in range(1, 9):
        small.save(path(f"orient_{o}_le.jpg"), quality=90, exif=exif_app1(o, False))
        small.save(path(f"orient_{o}_be.jpg"), quality=90, exif=exif_app1(o, True))
    odd.save(path("orient_6_203x157.jpg"), quality=90, exif=exif_app1(6, True))
    small.save(path("orient_6.png"), exif=exif_app1(6, False))
    small.save(path("orient_8.webp"), lossless=True, exif=exif_app1(8, True))

    # PNG modes.
    base.save(path("png_rgb.png"))
    base.convert("L").save(path("png_l.png"))
    la = Image.merge("LA", (base.convert("L"), Image.fromarray(rng.integers(0, 256, (120, 160), dtype=np.uint8))))
    la.save(path("png_la.png"))
    rgba = base.convert("RGBA")
    rgba.putalpha(Image.fromarray(np.tile(np.arange(160, dtype=np.uint8), (120, 1))))
    rgba.save(path("png_rgba.png"))
    p = base.quantize(colors=64, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    p.info["transparency"] = 3
    p.save(path("png_palette.png"), transparency=3)
    base.convert("L").point(lambda v: 255 if v > 110 else 0).convert("1").save(path("png_1bit.png"))
    rgb16 = (np.asarray(base).astype(np.uint16) * 257 + rng.integers(0, 257, (120, 160, 3))).astype(">u2")
    raw = b"".join(b"\0" + rgb16[y].tobytes() for y in range(120))
    with open(path("png_rgb16.png"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 160, 120, 16, 2, 0, 0, 0))
                + png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b""))
    g16 = Image.fromarray((np.tile(np.arange(64, dtype=np.int32) * 8, (16, 1))).astype(np.int32), "I")
    g16.save(path("png_gray16.png"))
    base.save(path("png_named_as.jpg"), format="PNG")

    # GIF, BMP, WebP.
    base.quantize(colors=100, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path("gif_palette.gif"))
    frames = [base.quantize(colors=32, dither=Image.Dither.NONE), odd.resize((160, 120)).quantize(colors=32, dither=Image.Dither.NONE)]
    frames[0].save(path("gif_animated.gif"), save_all=True, append_images=frames[1:], duration=100, loop=0)
    p.save(path("gif_offset_frame.gif"), transparency=3)
    gif = bytearray(open(path("gif_offset_frame.gif"), "rb").read())
    gif[6:10] = struct.pack("<HH", 170, 130)                        # screen larger than the frame
    at = gif.index(b"\x2c" + struct.pack("<HHHH", 0, 0, 160, 120))
    gif[at + 1: at + 5] = struct.pack("<HH", 7, 4)                     # frame placed at (7, 4)
    open(path("gif_offset_frame.gif"), "wb").write(bytes(gif))
    base.save(path("bmp_rgb24.bmp"))
    p.save(path("bmp_palette8.bmp"))
    base.convert("1").save(path("bmp_1bit.bmp"))
    base.save(path("webp_lossless.webp"), lossless=True)
    base.save(path("webp_lossy.webp"), quality=80, method=4)
    odd.save(path("webp_lossy_203x157.webp"), quality=90, method=4)
    rgba.save(path("webp_lossless_rgba.webp"), lossless=True)
    rgba.save(path("webp_lossy_rgba.webp"), quality=80, method=4)
    tiny = odd.resize((37, 23)).convert("RGBA")
    rng_webp = np.random.default_rng(20240602)                        # own stream: earlier fixtures stay as they were
    holes = rng_webp.integers(0, 256, (23, 37), dtype=np.uint8)
    holes[:, :9] = 0                                                  # fully transparent columns
    tiny.putalpha(Image.fromarray(holes))
    tiny.save(path("webp_lossy_rgba_37x23.webp"), quality=70, method=4, exact=True)
    tiny.save(path("webp_lossless_rgba_37x23.webp"), lossless=True, exact=True)
    odd.resize((1, 1)).save(path("webp_lossy_1x1.webp"), quality=80, method=4)
    odd.resize((3, 5)).save(path("webp_lossy_3x5.webp"), quality=80, method=4)

    # Bad cases.
    open(path("bad_empty.jpg"), "wb").close()
    jpeg = open(path("jpeg_420_160x120.jpg"), "rb").read()
    open(path("bad_truncated.jpg"), "wb").write(jpeg[: len(jpeg) * 6 // 10])
    prog = open(path("jpeg_progressive_160x120.jpg"), "rb").read()
    open(path("bad_truncated_progressive.jpg"), "wb").write(prog[: len(prog) * 6 // 10])
    pngb = open(path("png_rgb.png"), "rb").read()
    open(path("bad_truncated.png"), "wb").write(pngb[: len(pngb) * 6 // 10])
    gifb = open(path("gif_palette.gif"), "rb").read()
    open(path("bad_truncated.gif"), "wb").write(gifb[: len(gifb) // 2])
    webpb = open(path("webp_lossless.webp"), "rb").read()
    open(path("bad_truncated.webp"), "wb").write(webpb[: len(webpb) * 6 // 10])
    corrupt = bytearray(webpb)
    corrupt[30:60] = bytes(rng_webp.integers(0, 256, 30, dtype=np.uint8))   # VP8L transform / Huffman data, header intact
    open(path("bad_corrupt_vp8l.webp"), "wb").write(bytes(corrupt))
    corrupt = bytearray(open(path("webp_lossy.webp"), "rb").read())
    corrupt[40:80] = bytes(rng_webp.integers(0, 256, 40, dtype=np.uint8))   # VP8 first partition, frame header intact
    open(path("bad_corrupt_vp8.webp"), "wb").write(bytes(corrupt))
    dht = jpeg.index(b"\xff\xc4")
    corrupt = bytearray(jpeg)
    corrupt[dht + 5: dht + 21] = b"\xff" * 16                      # Huffman code counts that overflow
    open(path("bad_corrupt_huffman.jpg"), "wb").write(bytes(corrupt))
    corrupt = bytearray(pngb)
    idat = pngb.index(b"IDAT")
    corrupt[idat + 4: idat + 40] = bytes(rng.integers(0, 256, 36, dtype=np.uint8))
    open(path("bad_corrupt_idat.png"), "wb").write(bytes(corrupt))
    open(path("bad_text.png"), "wb").write(b"this is not an image, just text that lies about its name\n" * 4)
    base.save(path("bad_unsupported.tif"))
    ihdr = lambda w, h: png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    tiny_idat = png_chunk(b"IDAT", zlib.compress(b"\0" * 301, 9))
    open(path("bad_huge_header.png"), "wb").write(b"\x89PNG\r\n\x1a\n" + ihdr(100000, 100000) + tiny_idat + png_chunk(b"IEND", b""))
    open(path("bad_zero_width.png"), "wb").write(b"\x89PNG\r\n\x1a\n" + ihdr(0, 100) + tiny_idat + png_chunk(b"IEND", b""))
    sof = jpeg.index(b"\xff\xc0")
    huge = bytearray(jpeg)
    huge[sof + 5: sof + 9] = struct.pack(">HH", 65000, 65000)
    open(path("bad_huge_header.jpg"), "wb").write(bytes(huge))
    zero = bytearray(jpeg)
    zero[sof + 5: sof + 9] = struct.pack(">HH", 0, 160)
    open(path("bad_zero_height.jpg"), "wb").write(bytes(zero))
    gif = bytearray(gifb)
    gif[6:10] = struct.pack("<HH", 0, 0)
    open(path("bad_zero_size.gif"), "wb").write(bytes(gif))

    for name in ["jpeg_420_160x120.jpg", "jpeg_422_160x120.jpg", "jpeg_444_160x120.jpg", "jpeg_progressive_160x120.jpg",
                 "jpeg_gray_160x120.jpg", "jpeg_cmyk_adobe_160x120.jpg", "jpeg_ycck_160x120.jpg"]:
        good(name, drafts=(2,))
    for name in ["jpeg_420_203x157.jpg", "jpeg_progressive_203x157.jpg", "jpeg_gray_203x157.jpg"]:
        good(name, drafts=(2, 4, 8))
    for o in range(1, 9):
        good(f"orient_{o}_le.jpg", orientation=o)
        good(f"orient_{o}_be.jpg", orientation=o)
    good("orient_6_203x157.jpg", orientation=6, transpose_drafts=(2, 4))
    good("orient_6.png", orientation=6)
    good("orient_8.webp", orientation=8)
    for name in ["png_rgb.png", "png_l.png", "png_la.png", "png_rgba.png", "png_palette.png", "png_1bit.png",
                 "png_rgb16.png", "png_gray16.png", "png_named_as.jpg", "gif_palette.gif", "gif_animated.gif", "gif_offset_frame.gif",
                 "bmp_rgb24.bmp", "bmp_palette8.bmp", "bmp_1bit.bmp", "webp_lossless.webp", "webp_lossy.webp",
                 "webp_lossy_203x157.webp", "webp_lossless_rgba.webp", "webp_lossy_rgba.webp", "webp_lossy_rgba_37x23.webp",
                 "webp_lossless_rgba_37x23.webp", "webp_lossy_1x1.webp", "webp_lossy_3x5.webp"]:
        good(name)
    for name in ["webp_lossy.webp", "webp_lossy_203x157.webp", "webp_lossy_rgba.webp", "webp_lossy_rgba_37x23.webp",
                 "webp_lossy_1x1.webp", "webp_lossy_3x5.webp"]:
        pillow_reference(name)
    for name in sorted(entries):
        if name.endswith(".webp"):
            libwebp_rgb_matches_pillow(name)
    bad("bad_empty.jpg", "zero-byte file")
    bad("bad_truncated.jpg", "baseline JPEG cut at 60%")
    bad("bad_truncated_progressive.jpg", "progressive JPEG cut at 60%")
    bad("bad_truncated.png", "PNG cut at 60%")
    bad("bad_truncated.gif", "GIF cut at 50%")
    bad("bad_truncated.webp", "lossless WebP cut at 60%")
    bad("bad_corrupt_vp8l.webp", "lossless WebP, bytes 30..60 replaced by random bytes")
    bad("bad_corrupt_vp8.webp", "lossy WebP, bytes 40..80 replaced by random bytes")
    bad("bad_corrupt_huffman.jpg", "DHT code counts overwritten with 0xFF")
    bad("bad_corrupt_idat.png", "IDAT bytes replaced by random bytes")
    bad("bad_text.png", "a text file named .png")
    bad("bad_unsupported.tif", "TIFF, not a supported format")
    bad("bad_huge_header.png", "IHDR claims 100000x100000")
    bad("bad_huge_header.jpg", "SOF claims 65000x65000")
    bad("bad_zero_width.png", "IHDR width 0")
    bad("bad_zero_height.jpg", "SOF height 0")
    bad("bad_zero_size.gif", "logical screen 0x0")
    with open(path("expected.json"), "w") as f:
        json.dump({"generator": "make_fixtures.py", "pillow": PIL.__version__, "libwebp": libwebp_version(), "files": entries}, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
