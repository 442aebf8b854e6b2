package dev.stoker.image.decode;

/**
 * Whether the decoder turns pixels upright by the EXIF orientation tag. {@code APPLY} matches
 * {@code transformers.image_utils.load_image} ({@code ImageOps.exif_transpose}); {@code IGNORE} matches a plain
 * {@code Image.open(f).convert("RGB")} as the older official Qwen-VL code, LLaMA-Factory and qwen-vl-utils do.
 */
public enum ExifPolicy { APPLY, IGNORE }
