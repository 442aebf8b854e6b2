package dev.stoker.pipeline;

import dev.stoker.core.SampleException;
import dev.stoker.text.ChatSample;
import dev.stoker.text.QwenTokenizer;
import dev.stoker.text.SampleParser;
import dev.stoker.text.TextFeatures;
import dev.stoker.text.TokenSequenceBuilder;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Turns one SFT record into its model inputs: parse → per image read, probe and plan the resize →
 * tokens (an over-long sample is refused here, before any pixel is decoded) → decode, resize,
 * normalize and patchify the images whose tokens survived.
 *
 * <p>Threading: one instance per thread; it holds that thread's decoder and resize buffers. The
 * tokenizer may be shared.
 */
public final class SampleEncoder {
    /** Where image bytes come from (local files now, object stores later). */
    @FunctionalInterface
    public interface ImageSource {
        byte[] read(String sampleId, String reference);

        /** Reads through {@code source}, waiting for each fetch (for one-off commands and benchmarks of the CPU half). */
        static ImageSource blocking(dev.stoker.source.ObjectSource source) {
            return (sampleId, reference) -> {
                try {
                    return source.fetch(sampleId, reference).join();
                } catch (java.util.concurrent.CompletionException e) {
                    if (e.getCause() instanceof SampleException se) throw se;
                    throw new SampleException(sampleId, SampleException.Stage.FETCH, String.valueOf(e.getCause()), e.getCause());
                }
            };
        }
    }

    /**
     * Supplies the array a sample's pixel_values are written into, at least {@code floats} long.
     * {@link #FRESH} allocates an exact array per sample; a caller that consumes the rows before
     * encoding the next sample may hand out one reused array and spare the allocation.
     */
    @FunctionalInterface
    public interface PixelBuffers {
        PixelBuffers FRESH = float[]::new;

        float[] get(int floats);
    }

    private final EncodeOptions options;
    private final SampleParser parser = new SampleParser();
    private final TokenSequenceBuilder tokens;
    private final ImagePreprocessor images;

    public SampleEncoder(EncodeOptions options, QwenTokenizer tokenizer) {
        this.options = options;
        this.tokens = TokenSequenceBuilder.forPreset(tokenizer, options.preset(), options.maxSequenceLength(), options.truncation());
        this.images = new ImagePreprocessor(options);
    }

    public EncodeOptions options() { return options; }

    /** Encodes one JSONL line (raw bytes, UTF-8 validated); images are read through {@code source}. */
    public EncodedSample encodeLine(byte[] line, String fallbackId, ImageSource source) {
        return encode(parser.parseLine(line, fallbackId), source);
    }

    /** {@link #encodeLine(byte[], String, ImageSource)} writing pixel_values into an array from {@code buffers}. */
    public EncodedSample encodeLine(byte[] line, String fallbackId, ImageSource source, PixelBuffers buffers) {
        return encode(parser.parseLine(line, fallbackId), source, buffers);
    }

    /** Encodes a parsed sample whose image bytes were fetched beforehand, keyed by reference. */
    public EncodedSample encode(ChatSample sample, Map<String, byte[]> imagesByReference) {
        return encode(sample, (id, ref) -> {
            byte[] bytes = imagesByReference.get(ref);
            if (bytes == null) throw new SampleException(id, SampleException.Stage.FETCH, "image '" + ref + "' was not fetched");
            return bytes;
        });
    }

    public EncodedSample encode(ChatSample sample, ImageSource source) {
        return encode(sample, source, PixelBuffers.FRESH);
    }

    /** Encodes a sample writing pixel_values into an array from {@code buffers}. */
    public EncodedSample encode(ChatSample sample, ImageSource source, PixelBuffers buffers) {
        String id = sample.id();
        List<String> refs = sample.imagePaths();
        var planned = new ArrayList<ImagePreprocessor.Planned>(refs.size());
        var grids = new ArrayList<long[]>(refs.size());
        for (String ref : refs) {
            try {
                var p = images.plan(source.read(id, ref), ref);
                planned.add(p);
                grids.add(p.gridThw());
            } catch (SampleException e) {
                throw inSample(id, ref, e);
            }
        }
        TextFeatures text = tokens.build(sample, grids);
        int kept = text.imagesKept();
        int rowLength = options.vision().rowLength();
        long rows = 0;
        for (int k = 0; k < kept; k++) rows += planned.get(k).plan().rows();
        if (rows * rowLength > Integer.MAX_VALUE - 8)
            throw new SampleException(id, SampleException.Stage.TRANSFORM, "pixel_values of " + rows + " rows is too large for one sample");
        float[] pixels = buffers.get((int) (rows * rowLength));
        long[] gridThw = new long[kept * 3];
        long sourcePixels = 0;
        int offset = 0;
        for (int k = 0; k < kept; k++) {
            var img = planned.get(k);
            try {
                images.processInto(img, pixels, offset);
                offset += img.plan().rows() * rowLength;
                System.arraycopy(img.gridThw(), 0, gridThw, 3 * k, 3);
                sourcePixels += img.info().pixelCount();
            } catch (SampleException e) {
                throw inSample(id, img.name(), e);
            }
        }
        return new EncodedSample(id, text.inputIds(), text.labels(), text.attentionMask(), text.positionIds(),
                pixels, rowLength, gridThw, sourcePixels);
    }

    /** The error re-labelled {@code sample (image)}, so a report names both. */
    private static SampleException inSample(String sampleId, String ref, SampleException e) {
        var copy = new SampleException(sampleId + " (" + ref + ")", e.stage(), e.getMessage(), e.getCause());
        copy.setStackTrace(e.getStackTrace());
        return copy;
    }
}
