package dev.stoker.image.decode;

/**
 * An image's header as parsed by {@link HeaderReader}: the public {@link ImageInfo} plus what the decoders need
 * beyond it (JPEG component count and whether its frame is progressive, which sizes libjpeg's coefficient buffers;
 * placement and transparent index of a GIF's first frame).
 */
record Header(ImageInfo info, int jpegComponents, GifFrame gifFrame, boolean jpegProgressive) {
    Header(ImageInfo info, int jpegComponents, GifFrame gifFrame) { this(info, jpegComponents, gifFrame, false); }

    /** Placement of a GIF's first frame on its logical screen; {@code transparentIndex} is -1 when none. */
    record GifFrame(int left, int top, int width, int height, int transparentIndex) {}
}
