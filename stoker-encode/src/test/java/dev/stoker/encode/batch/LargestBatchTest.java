package dev.stoker.encode.batch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.plan.pack.ShapeIndex;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The bound on a job's largest padded batch from its samples' shapes: never below the largest batch any {@code B} of them
 * make (every subset enumerated, each sized as the zero-copy writer sizes it: {@link BatchShape} of the summed rows,
 * images and compact bytes, the dummy image added as {@link DummyImage#addTo} adds it), and close to it; records that are
 * errors or filtered count for nothing; a step that may repeat a record is bounded by B times the largest.
 */
@Timeout(60)
class LargestBatchTest {
    private static final EncodeOptions OPTIONS = EncodeOptions.defaults(ProcessorPreset.QWEN2_VL).withPixels(3136, 451584);

    /** One- and two-image samples of a few hundred tokens: patches of 640×480 (391·… rows), 1280×720 at the cap, and so on. */
    private static List<SampleShape> oneAndTwoImages() {
        return List.of(SampleShape.of(420, 1200), SampleShape.of(900, 2304, 2304), SampleShape.of(300, 396),
                SampleShape.of(1250, 2304), SampleShape.of(610, 1200, 396), SampleShape.of(180), SampleShape.of(700, 2304, 1200));
    }

    /** The largest batch of at most {@code batch} of {@code shapes}, every subset sized as the writer sizes it. */
    private static long bruteForce(EncodeOptions options, List<SampleShape> shapes, int batch) {
        var dummy = DummyImage.forPolicy(options.textOnly(), options.vision(), options.imageBackend());
        long patchBytes = (long) options.vision().patchSize() * options.vision().patchSize() * 3;
        boolean compact = options.pixelFormat() == PixelFormat.UINT8;
        long most = 0;
        for (int mask = 1; mask < 1 << shapes.size(); mask++) {
            if (Integer.bitCount(mask) > batch) continue;
            int len = 0, images = 0, b = 0;
            long rows = 0;
            var members = new ArrayList<SampleShape>();
            for (int i = 0; i < shapes.size(); i++) {
                if ((mask & 1 << i) == 0) continue;
                var s = shapes.get(i);
                if (s.kind() != SampleShape.Kind.OK) continue;
                members.add(s);
                b++;
                len = Math.max(len, s.tokens());
                images += s.imagePatches().length;
                for (int p : s.imagePatches()) rows += p;
            }
            if (b == 0) continue;
            var shape = new BatchShape(b, len, rows, options.vision().rowLength(), images, options.pixelFormat(),
                    compact ? rows * patchBytes : 0, options.inputContract());
            if (DummyImage.needed(dummy, b, images))
                for (var first : members) most = Math.max(most, dummy.addTo(shape, first.tokens()).sizeBytes());
            else most = Math.max(most, shape.sizeBytes());
        }
        return most;
    }

    @Test
    void oneAndTwoImageSamplesBoundTheirLargestBatchClosely() {
        var shapes = oneAndTwoImages();
        for (var options : List.of(OPTIONS, OPTIONS.withPixelFormat(PixelFormat.UINT8))) {
            for (int batch : new int[] {1, 3, 4}) {
                var largest = LargestBatch.padded(options, batch, ShapeIndex.of(shapes), false);
                long exact = bruteForce(options, shapes, batch);
                assertTrue(largest.bytes() >= exact, options.pixelFormat() + " batch " + batch + ": " + largest.bytes() + " < " + exact);
                assertTrue(largest.bytes() <= exact * 1.05, options.pixelFormat() + " batch " + batch + ": " + largest.bytes()
                        + " is far above the largest batch " + exact);
                assertEquals(shapes.size(), largest.records());
                assertEquals(1, largest.largestRecord(), "the sample of two images at the cap");
            }
        }
        // the configuration's worst case for the same options: samples at 8192 tokens, each full of images at the cap
        long rowsPerSample = 8192L * 4;
        long worst = new BatchShape(4, 8192, 4 * rowsPerSample, OPTIONS.vision().rowLength(), 4 * 14).sizeBytes();
        assertTrue(LargestBatch.padded(OPTIONS, 4, ShapeIndex.of(shapes), false).bytes() * 5 < worst, "far below the worst case");
    }

    @Test
    void errorsAndFilteredRecordsCountForNothing() {
        var shapes = new ArrayList<>(oneAndTwoImages());
        long before = LargestBatch.padded(OPTIONS, 3, ShapeIndex.of(shapes), false).bytes();
        shapes.add(new SampleShape(SampleShape.Kind.FILTERED, 0, null));
        shapes.add(new SampleShape(SampleShape.Kind.ERROR, 0, null));
        var after = LargestBatch.padded(OPTIONS, 3, ShapeIndex.of(shapes), false);
        assertEquals(before, after.bytes());
        assertEquals(shapes.size(), after.records());
        var none = LargestBatch.padded(OPTIONS, 3, ShapeIndex.of(List.of(new SampleShape(SampleShape.Kind.ERROR, 0, null))), false);
        assertEquals(0, none.bytes());
        assertEquals(-1, none.largestRecord());
        assertThrows(IllegalArgumentException.class, () -> LargestBatch.padded(OPTIONS, 0, ShapeIndex.of(shapes), false));
    }

    @Test
    void aBatchOfTextOnlySamplesCountsTheDummyImage() {
        var options = OPTIONS.withTextOnly(EncodeOptions.TextOnlyPolicy.DUMMY_IMAGE);
        var textOnly = List.of(SampleShape.of(800), SampleShape.of(300), SampleShape.of(1200));
        var largest = LargestBatch.padded(options, 2, ShapeIndex.of(textOnly), false);
        long exact = bruteForce(options, textOnly, 2);
        assertTrue(largest.bytes() >= exact && largest.bytes() <= exact * 1.05, largest.bytes() + " vs " + exact);
        var allow = OPTIONS.withTextOnly(EncodeOptions.TextOnlyPolicy.ALLOW);
        assertTrue(largest.bytes() > LargestBatch.padded(allow, 2, ShapeIndex.of(textOnly), false).bytes(), "the dummy's pixels on top");
        assertEquals(bruteForce(allow, textOnly, 2), LargestBatch.padded(allow, 2, ShapeIndex.of(textOnly), false).bytes(), "no pixels");
        var mixed = new ArrayList<>(oneAndTwoImages());
        largest = LargestBatch.padded(options, 3, ShapeIndex.of(mixed), false);
        exact = bruteForce(options, mixed, 3);
        assertTrue(largest.bytes() >= exact && largest.bytes() <= exact * 1.05, largest.bytes() + " vs " + exact);
    }

    @Test
    void aStepThatMayRepeatARecordIsBoundedByBTimesTheLargest() {
        var shapes = oneAndTwoImages();
        var allow = OPTIONS.withTextOnly(EncodeOptions.TextOnlyPolicy.ALLOW); // no dummy image on top
        long once = LargestBatch.padded(allow, 3, ShapeIndex.of(shapes), false).bytes();
        long repeats = LargestBatch.padded(allow, 3, ShapeIndex.of(shapes), true).bytes();
        long threeOfTheLargest = new BatchShape(3, 1250, 3 * 4608, allow.vision().rowLength(), 6, PixelFormat.FLOAT32, 0,
                allow.inputContract()).sizeBytes();
        assertTrue(repeats > once, repeats + " vs " + once);
        assertEquals(threeOfTheLargest, repeats, "three times the most rows, images and the longest sample");
    }

    @Test
    void videosAddTheirRowsAndInTheCompactFormatTheirFrames() {
        var u8 = OPTIONS.withPixelFormat(PixelFormat.UINT8).withTextOnly(EncodeOptions.TextOnlyPolicy.ALLOW);
        var withVideo = List.of(SampleShape.of(900, new int[] {1200}, new int[] {4 * 600}, new int[] {4}), SampleShape.of(400, 396));
        var largest = LargestBatch.padded(u8, 2, ShapeIndex.of(withVideo), false);
        long patchBytes = 14 * 14 * 3;
        var shape = new BatchShape(2, 900, 1200 + 396, u8.vision().rowLength(), 2, PixelFormat.UINT8, (1200 + 396) * patchBytes,
                u8.inputContract()).withVideos(new BatchShape.Videos(2400, 1, true, 2400 * 2 * patchBytes));
        assertEquals(shape.sizeBytes(), largest.bytes(), "4 temporal groups of 2 frames, each 600 patches of 14×14×3 bytes");
    }

    /**
     * An audio family's clips (issue 32): the bound holds every subset of {@code B} samples' {@code input_features} and
     * {@code feature_attention_mask} (a row per clip, as wide as the widest sample's, plus the slack for a header's
     * duration), and it grows with the clips: under {@code --audio-pad hf} (every Qwen2.5-Omni clip 30,000 frames) it is
     * the batch's clips times 15.5 MB, not the token-and-pixel bound of the same samples without clips.
     */
    @Test
    void anAudioJobsClipsAreCounted() {
        var options = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withTextOnly(EncodeOptions.TextOnlyPolicy.ALLOW);
        var valid = List.of(SampleShape.of(120).withClips(new int[] {251}), SampleShape.of(300).withClips(new int[] {251, 1001}),
                SampleShape.of(80), SampleShape.of(200).withClips(new int[] {600}), SampleShape.of(150).withClips(new int[] {90, 90, 90}));
        var hf = valid.stream().map(s -> s.clips() == 0 ? s : s.withClips(java.util.Arrays.stream(s.clipFrames()).map(f -> 30_000).toArray()))
                .toList();
        for (var shapes : List.of(valid, hf))
            for (int batch = 1; batch <= shapes.size(); batch++) {
                long bound = LargestBatch.padded(options, batch, ShapeIndex.of(shapes), false).bytes();
                long most = 0;
                for (int mask = 1; mask < 1 << shapes.size(); mask++) {
                    if (Integer.bitCount(mask) > batch) continue;
                    int len = 0, clips = 0, frames = 0;
                    for (int i = 0; i < shapes.size(); i++)
                        if ((mask & 1 << i) != 0) {
                            len = Math.max(len, shapes.get(i).tokens());
                            clips += shapes.get(i).clips();
                            frames = Math.max(frames, shapes.get(i).audioFrames());
                        }
                    var shape = new BatchShape(Integer.bitCount(mask), len, 0, options.vision().rowLength(), 0, PixelFormat.FLOAT32, 0,
                            options.inputContract());
                    if (clips > 0) shape = shape.withAudio(new BatchShape.Audio(clips, frames));
                    most = Math.max(most, shape.sizeBytes());
                }
                assertTrue(bound >= most, batch + ": " + bound + " < " + most);
                assertTrue(bound < most * 2, batch + ": " + bound + " far above " + most); // each sum on its own: loose, not wild
            }
        long withoutClips = LargestBatch.padded(options, 3, ShapeIndex.of(hf.stream().map(s -> SampleShape.of(s.tokens())).toList()), false).bytes();
        long withClips = LargestBatch.padded(options, 3, ShapeIndex.of(hf), false).bytes();
        assertTrue(withClips - withoutClips >= 6L * 30_000 * (128 * 4 + 4), "the three samples with most clips: 6 clips of 15.5 MB");
    }
}
