package dev.stoker.image.decode;

/**
 * What an image's header says: its format, stored size in pixels and EXIF orientation (1..8, 1 when absent or
 * out of range), read without decoding pixels.
 */
public record ImageInfo(ImageFormat format, int width, int height, int exifOrientation) {
    public ImageInfo {
        if (exifOrientation < 1 || exifOrientation > 8) throw new IllegalArgumentException("EXIF orientation " + exifOrientation);
    }

    /** Width after {@link ExifPolicy#APPLY}: the stored height for orientations 5..8, which swap the axes. */
    public int orientedWidth() { return exifOrientation >= 5 ? height : width; }

    /** Height after {@link ExifPolicy#APPLY}. */
    public int orientedHeight() { return exifOrientation >= 5 ? width : height; }

    public long pixelCount() { return (long) width * height; }
}
