package dev.stoker.encode.batch;

import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.plan.pack.ShapeIndex;
import java.util.PriorityQueue;

/**
 * A bound on the bytes of the largest padded batch a job makes from the samples it really has, known from their shapes
 * (a {@link ShapeIndex}: {@code stoker validate}'s length index, or the same header scan run in-process) without a
 * pixel: what sizes shared memory from the data rather than from the configuration's worst case (every sample at
 * {@code --max-seq-len} full of images at {@code --max-pixels}), which for a data set of one- and two-image samples asks
 * for ten times the memory its batches ever take.
 *
 * <p>How it bounds: a padded batch's bytes ({@link BatchShape#sizeBytes}, the same layout the writers allocate) grow with
 * each of its sums — pixel rows, images, compact pixel bytes, video rows, videos, video bytes — and with its longest
 * sample, so a batch of any {@code B} samples is at most the shape whose length is the longest sample's and whose every
 * sum is that of the {@code B} samples largest in it, each sum taken on its own. Per sample, from its shape: an image of
 * {@code p = h·w} patches (grid t = 1) has {@code p} rows of {@code pixel_values} and, compact, {@code p·patch²·3} u8
 * bytes (its resized H·W·3); a video of {@code t·h·w} patches in {@code t} temporal groups has that many rows and, compact,
 * at most {@code t·temporal_patch} frames of {@code h·w·patch²·3} bytes. A batch of the text-only policy DUMMY_IMAGE
 * with no image gets the dummy ({@link DummyImage#addTo}): its tokens, rows and image are counted on top wherever a
 * sample has no image or video.
 *
 * <p>An audio family's clips (issue 32), where the shapes know them ({@link SampleShape#clipFrames}: a start-up scan's):
 * the batch's {@code input_features} has a row per clip, each as wide as its widest sample's, so it is bounded by the
 * {@code B} largest clip counts and the widest sample, plus {@link #AUDIO_FRAME_SLACK} frames: a clip's frames come from
 * its header's duration, which may fall short of the decoded length by up to one codec frame (docs/audio.md, "What
 * validate counts": 420 frames from an AAC header, 421 decoded).
 *
 * <p>Records the index marks as errors or filtered are never fed and count for nothing. When a step may hold one record
 * twice ({@code repeats}: sources mixed by weight, which may upsample one), each sum is {@code B} times its largest.
 *
 * @param bytes         the bound, in bytes of the {@code STKB} layout
 * @param records       records whose shapes were read (fed or not)
 * @param largestRecord the fed record with the most pixel and video rows (−1 when none is fed): what a message names
 */
public record LargestBatch(long bytes, int records, int largestRecord) {
    /** Frames added to the widest clip's, for a header's duration short of the decoded one (an AAC frame is ≤ 13 frames at 8 kHz). */
    public static final int AUDIO_FRAME_SLACK = 16;

    /**
     * The bound on a padded batch of {@code batch} samples encoded with {@code options} from the records of
     * {@code shapes}; {@code repeats}: whether one step may hold a record more than once.
     *
     * @throws IllegalArgumentException when {@code batch} is not positive
     */
    public static LargestBatch padded(EncodeOptions options, int batch, ShapeIndex shapes, boolean repeats) {
        if (batch < 1) throw new IllegalArgumentException("a batch holds at least one sample, not " + batch);
        var vision = options.vision();
        PixelFormat format = options.pixelFormat();
        boolean compact = format == PixelFormat.UINT8;
        long patchBytes = (long) vision.patchSize() * vision.patchSize() * 3; // one patch's resized u8 RGB
        int n = shapes.size();
        // each sum over the batch's samples, bounded by the sum of its batch largest terms (each its own top list)
        var rows = new TopSum(batch, repeats);
        var images = new TopSum(batch, repeats);
        var videoRows = new TopSum(batch, repeats);
        var videos = new TopSum(batch, repeats);
        var videoBytes = new TopSum(batch, repeats);
        var clips = new TopSum(batch, repeats);
        int longest = 0, largest = -1, audioFrames = 0;
        long largestRows = -1;
        boolean withoutVisual = false;
        for (int i = 0; i < n; i++) {
            SampleShape s = shapes.shape(i);
            if (s.kind() != SampleShape.Kind.OK) continue;
            longest = Math.max(longest, s.tokens());
            long r = 0, vr = 0, vb = 0;
            for (int p : s.imagePatches()) r += p;
            for (int v = 0; v < s.videoPatches().length; v++) {
                vr += s.videoPatches()[v];
                vb += (long) s.videoPatches()[v] * vision.temporalPatchSize() * patchBytes; // at most t·tps frames of h·w patches
            }
            rows.add(r);
            images.add(s.imagePatches().length);
            videoRows.add(vr);
            videos.add(s.videoPatches().length);
            videoBytes.add(vb);
            clips.add(s.clips());
            audioFrames = Math.max(audioFrames, s.audioFrames());
            if (s.imagePatches().length + s.videoPatches().length == 0) withoutVisual = true;
            if (r + vr > largestRows) {
                largestRows = r + vr;
                largest = i;
            }
        }
        if (largest < 0) return new LargestBatch(0, n, -1);
        long pixelRows = rows.sum(), u8 = compact ? Math.multiplyExact(pixelRows, patchBytes) : 0;
        long imageCount = images.sum();
        int length = longest;
        var dummy = DummyImage.forPolicy(options.textOnly(), vision, options.imageBackend());
        if (dummy != null && withoutVisual) { // the dummy's tokens after a sample, its rows and its image, on top
            length = Math.addExact(length, dummy.tokenCount());
            pixelRows += dummy.rows();
            imageCount += 1;
            if (compact) u8 += dummy.pixelBytes(PixelFormat.UINT8);
        }
        if (imageCount > Integer.MAX_VALUE - 8 || videos.sum() > Integer.MAX_VALUE - 8)
            throw new IllegalArgumentException("a batch of " + batch + " samples would hold " + imageCount + " images and " + videos.sum()
                    + " videos: too many for one batch");
        var shape = new BatchShape(batch, length, pixelRows, vision.rowLength(), (int) imageCount, format, u8, options.inputContract());
        if (videos.sum() > 0)
            shape = shape.withVideos(new BatchShape.Videos(videoRows.sum(), (int) videos.sum(), true, compact ? videoBytes.sum() : 0));
        if (clips.sum() > 0) {
            if (clips.sum() > Integer.MAX_VALUE - 8)
                throw new IllegalArgumentException("a batch of " + batch + " samples would hold " + clips.sum() + " clips: too many for one batch");
            shape = shape.withAudio(new BatchShape.Audio((int) clips.sum(), Math.addExact(audioFrames, AUDIO_FRAME_SLACK)));
        }
        return new LargestBatch(shape.sizeBytes(), n, largest);
    }

    /** The sum of the {@code k} largest values added (or {@code k} times the largest, when a value may repeat). */
    private static final class TopSum {
        private final int k;
        private final boolean repeats;
        private final PriorityQueue<Long> top = new PriorityQueue<>();
        private long max;

        TopSum(int k, boolean repeats) {
            this.k = k;
            this.repeats = repeats;
        }

        void add(long v) {
            max = Math.max(max, v);
            if (repeats) return;
            if (top.size() < k) top.add(v);
            else if (v > top.peek()) {
                top.poll();
                top.add(v);
            }
        }

        long sum() {
            if (repeats) return Math.multiplyExact(max, (long) k);
            long s = 0;
            for (long v : top) s = Math.addExact(s, v);
            return s;
        }
    }
}
