package dev.stoker.pipeline.feed;

import java.util.Iterator;
import java.util.Locale;
import javax.imageio.ImageReadParam;
import javax.imageio.ImageReader;
import javax.imageio.ImageTypeSpecifier;
import javax.imageio.metadata.IIOMetadata;
import javax.imageio.spi.IIORegistry;
import javax.imageio.spi.ImageReaderSpi;
import javax.imageio.stream.ImageInputStream;

/**
 * An ImageIO reader for BMP whose every read throws {@link OutOfMemoryError}, as a reader does when its raster does not
 * fit the heap: the injection seam for "an OutOfMemoryError in one sample's work". {@link #install()} puts it ahead of the
 * JDK's BMP reader in ImageIO's registry (the decoders take the first reader of a format), {@link #close()} removes it.
 * Test data sets use BMP only for {@link BadSamples.Kind#OUT_OF_MEMORY}; the good samples are PNG and JPEG.
 *
 * <p>Threading: the registry is global to the JVM; install it only in a test that no other test runs beside (surefire
 * runs this module's classes one after another).
 */
final class OutOfMemoryBmpReader extends ImageReader {
    static final String MESSAGE = "Java heap space (injected by OutOfMemoryBmpReader)";

    private OutOfMemoryBmpReader(ImageReaderSpi spi) { super(spi); }

    /** Installs the reader; closing the handle uninstalls it. */
    static AutoCloseable install() {
        var registry = IIORegistry.getDefaultInstance();
        var spi = new Spi();
        registry.registerServiceProvider(spi, ImageReaderSpi.class);
        for (Iterator<ImageReaderSpi> it = registry.getServiceProviders(ImageReaderSpi.class, true); it.hasNext(); ) {
            var other = it.next();
            if (other != spi && java.util.Arrays.asList(other.getFormatNames()).contains("bmp"))
                registry.setOrdering(ImageReaderSpi.class, spi, other);
        }
        return () -> registry.deregisterServiceProvider(spi, ImageReaderSpi.class);
    }

    @Override public int getNumImages(boolean allowSearch) { return 1; }
    @Override public int getWidth(int imageIndex) { throw new OutOfMemoryError(MESSAGE); }
    @Override public int getHeight(int imageIndex) { throw new OutOfMemoryError(MESSAGE); }
    @Override public Iterator<ImageTypeSpecifier> getImageTypes(int imageIndex) { throw new OutOfMemoryError(MESSAGE); }
    @Override public IIOMetadata getStreamMetadata() { return null; }
    @Override public IIOMetadata getImageMetadata(int imageIndex) { return null; }

    @Override
    public java.awt.image.BufferedImage read(int imageIndex, ImageReadParam param) { throw new OutOfMemoryError(MESSAGE); }

    private static final class Spi extends ImageReaderSpi {
        Spi() {
            super("stoker tests", "1", new String[] {"bmp", "BMP"}, new String[] {"bmp"}, new String[] {"image/bmp"},
                    OutOfMemoryBmpReader.class.getName(), new Class<?>[] {ImageInputStream.class}, null, false, null, null, null,
                    null, false, null, null, null, null);
        }

        @Override public boolean canDecodeInput(Object source) { return false; } // only ever chosen by format name
        @Override public ImageReader createReaderInstance(Object extension) { return new OutOfMemoryBmpReader(this); }
        @Override public String getDescription(Locale locale) { return "BMP reader that runs out of memory (tests)"; }
    }
}
