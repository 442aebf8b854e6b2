package dev.stoker.image.decode;

import dev.stoker.core.SampleException;
import dev.stoker.image.RgbImage;

/**
 * Turns encoded image bytes into 8-bit RGB exactly as Pillow 9.4's {@code Image.open(f).convert("RGB")} does
 * (optionally followed by {@code ImageOps.exif_transpose}).
 *
 * <p>Every failure, whatever the input, is a {@link SampleException} with stage {@code DECODE} naming {@code name};
 * the decoder stays usable for the next image. That includes an image that would take more memory than
 * {@link DecodeOptions#maxDecodeBytes()} (refused from its header, before any pixel memory is allocated) and an
 * {@link OutOfMemoryError} while decoding (cause {@code out of memory: …}).
 *
 * <p>Threading: an instance from {@link ImageDecoders#forCurrentThread()} holds native state of its thread and must
 * only be used there; {@link ImageDecoders#imageIo()} is safe on any thread.
 */
public interface ImageDecoder {
    /** Reads the header only: format (from magic bytes), stored size and EXIF orientation. */
    ImageInfo probe(byte[] data, String name);

    /**
     * About how many bytes (heap and native) decoding {@code data} with {@code opts} would take on this decoder, from
     * its header alone; {@link #decode} refuses an image over {@code opts.maxDecodeBytes()}. Fails as {@link #probe} on
     * a bad header.
     */
    long decodeBytes(byte[] data, String name, DecodeOptions opts);

    /**
     * Decodes {@code data} to RGB.
     *
     * <p>The result is valid until the next {@code decode} call on this decoder: the per-thread native decoder
     * ({@link ImageDecoders#forCurrentThread()}) reuses one pixel buffer, so the next image overwrites this one.
     * Consume it (resize, patchify) before decoding again on the same thread, or copy it. Its {@code data()} may be
     * longer than {@code width·height·3}; only that prefix is the image.
     */
    RgbImage decode(byte[] data, String name, DecodeOptions opts);

    default RgbImage decode(byte[] data, String name) { return decode(data, name, DecodeOptions.defaults()); }
}
