package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.AudioPreset;
import dev.stoker.core.Npy;
import dev.stoker.core.batch.Tensor;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.StokerNode;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.transport.TrainerClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code serve --processor qwen2.5-omni --pack-tokens N} (issue 32, item 4: packs of audio samples) over
 * {@link AudioCliTest#RECORDS} (WAV, MP3 48 kHz stereo, two clips, H.264 video + MP3, an HF typed FLAC item; clips made by
 * FFmpeg at test time), two ranks, read by the Java trainer client through shared memory and through the socket: the
 * packs are {@code plan --pack-tokens N}'s, per (step, rank), segment for segment (the dummy image's included); the first
 * step holds every sample once; and each segment's rows — {@code input_ids}, {@code labels}, {@code position_ids} rows 1–3
 * (row 0 its own 0..L−1), its clips' {@code input_features} and {@code feature_attention_mask} rows (segment after
 * segment, widened with zeros to the pack's longest clip), the video's {@code pixel_values_videos} — equal what
 * {@code stoker encode} writes for that sample alone, bit for bit.
 */
@Tag("slow")
@Timeout(300)
class AudioPackTest {
    static final int RECORDS = 5, RANKS = 2, STEPS = 3, PACK_TOKENS = 512, SEED = 3;
    @TempDir static Path tmp;
    private static Path manifest;
    private static final List<Map<String, Npy.Array>> ENCODED = new ArrayList<>();

    @BeforeAll
    static void data() throws Exception {
        manifest = AudioServeTest.writeData(tmp);
        for (int i = 0; i < RECORDS; i++) ENCODED.add(AudioServeTest.encode(tmp, i));
    }

    /** {@code plan --pack-tokens}'s packs: each (step, rank)'s samples in segment order (−1: the dummy image). */
    private static Map<String, List<Long>> plan() throws Exception {
        return AudioFamiliesPackTest.plan("qwen2.5-omni", manifest, PACK_TOKENS, "--min-pixels", "3136", "--max-pixels", "50176");
    }

    private static NodeConfig config(String name, FeedMode mode) throws Exception {
        return NodeConfig.builder().data(manifest.toString()).set("processor", "qwen2.5-omni").ranks(RANKS).packTokens(PACK_TOKENS)
                .steps(STEPS).seed(SEED).pixels(3136, 50176).socket(tmp.resolve(name + ".sock"))
                .shmDir(Files.createDirectories(tmp.resolve("shm-" + name))).set(NodeConfig.MAX_SEQ_LEN, 512)
                .set(NodeConfig.PREFETCH_BATCHES, 1).shmBudgetBytes(256L << 20).threads(2).warmUpMillis(0).mode(mode)
                .set(NodeConfig.JOB, name).build();
    }

    @Test
    void thePacksArePlansAndEachSegmentIsEncodesBitForBit() throws Exception {
        var planned = plan();
        for (var mode : List.of(FeedMode.ZERO_COPY, FeedMode.PREFETCH)) {
            String name = "pack-" + mode.name().toLowerCase(java.util.Locale.ROOT);
            var config = config(name, mode);
            assertNull(config.audioFeedRefusal());
            var options = mode == FeedMode.ZERO_COPY ? TrainerClient.Options.SHARED_MEMORY : TrainerClient.Options.COPY;
            var served = new LinkedHashMap<String, List<Long>>();
            try (var node = StokerNode.launch(config)) {
                for (int rank = 0; rank < RANKS; rank++)
                    try (var c = TrainerClient.connect(node.socket(), rank, RANKS, name, options)) {
                        for (int s = 0; s < STEPS; s++)
                            try (var got = c.next()) {
                                var b = got.batch();
                                String key = b.meta().globalStep() + "/" + b.meta().rank();
                                var samples = Arrays.stream(b.sampleIndex()).boxed().toList();
                                assertNull(served.put(key, samples), mode + ": pack " + key + " twice");
                                check(mode + " pack " + key, b);
                            }
                    }
            }
            assertEquals(planned, served, mode + ": the packs are plan's, per (step, rank)");
            var first = new ArrayList<Long>();
            for (int rank = 0; rank < RANKS; rank++) first.addAll(served.get("0/" + rank));
            first.removeIf(x -> x < 0);
            assertEquals(RECORDS, first.size(), mode + ": step 0 " + first);
            assertEquals(RECORDS, new HashSet<>(first).size(), mode + ": every sample once in step 0 " + first);
        }
    }

    /** Checks one pack's tensors, segment by segment, against each sample's encode files. */
    private static void check(String what, dev.stoker.core.batch.BatchLayout.Batch b) {
        long[] index = b.sampleIndex();
        int[] cu = b.tensor("cu_seqlens").toInts();
        assertEquals(index.length + 1, cu.length, what + ": a segment per sample");
        var ids = b.tensor("input_ids");
        assertEquals(1, ids.shape()[0], what + ": one row");
        int t = (int) ids.shape()[1];
        long[] inputIds = ids.toLongs(), labels = b.tensor("labels").toLongs(), positions = b.tensor("position_ids").toLongs();
        assertArrayEquals(new long[] {4, 1, t}, b.tensor("position_ids").shape(), what);
        var names = b.tensors().stream().map(Tensor::name).toList();
        boolean video = Arrays.stream(index).anyMatch(i -> i >= 0 && ENCODED.get((int) i).containsKey("pixel_values_videos"));
        var expected = new ArrayList<>(List.of("input_ids", "labels", "position_ids", "pixel_values", "image_grid_thw"));
        if (video) expected.addAll(List.of("pixel_values_videos", "video_grid_thw", "second_per_grid_ts"));
        expected.addAll(List.of("input_features", "feature_attention_mask", "sample_index", "cu_seqlens", "max_seqlen", "seg_ids"));
        assertEquals(expected, names, what);
        var features = b.tensor("input_features");
        assertEquals(Tensor.DType.FLOAT32, features.dtype());
        assertEquals(Tensor.DType.INT32, b.tensor("feature_attention_mask").dtype());
        int frames = (int) features.shape()[2];
        byte[] f = AudioServeTest.bytes(features), m = AudioServeTest.bytes(b.tensor("feature_attention_mask"));
        int clip = 0, longest = 0;
        for (int k = 0; k < index.length; k++) {
            int at = cu[k], len = cu[k + 1] - cu[k];
            for (int x = 0; x < len; x++) assertEquals(x, positions[at + x], what + " segment " + k + ": row 0 its own 0..L-1");
            if (index[k] < 0) { // the dummy image: unsupervised, and no clip
                assertTrue(Arrays.stream(labels, at, at + len).allMatch(x -> x == -100), what + ": the dummy's labels");
                continue;
            }
            var e = ENCODED.get((int) index[k]);
            String seg = what + " segment " + k + " (record " + index[k] + ")";
            long[] eIds = AudioServeTest.longs(e.get("input_ids"));
            assertEquals(eIds.length, len, seg + ": its length");
            assertArrayEquals(eIds, Arrays.copyOfRange(inputIds, at, at + len), seg + " input_ids");
            assertArrayEquals(AudioServeTest.longs(e.get("labels")), Arrays.copyOfRange(labels, at, at + len), seg + " labels");
            long[] p = AudioServeTest.longs(e.get("position_ids"));
            for (int r = 0; r < 3; r++)
                assertArrayEquals(Arrays.copyOfRange(p, r * len, (r + 1) * len),
                        Arrays.copyOfRange(positions, (r + 1) * t + at, (r + 1) * t + at + len), seg + " position_ids row " + (r + 1));
            var ef = e.get("input_features");
            int clips = (int) ef.shape()[0], own = (int) ef.shape()[2];
            longest = Math.max(longest, own);
            byte[] efd = ef.data(), emd = e.get("feature_attention_mask").data();
            for (int c = 0; c < clips; c++, clip++) {
                for (int bin = 0; bin < AudioPreset.MEL_BINS; bin++) {
                    int to = ((clip * AudioPreset.MEL_BINS + bin) * frames) * 4, from = ((c * AudioPreset.MEL_BINS + bin) * own) * 4;
                    assertArrayEquals(Arrays.copyOfRange(efd, from, from + own * 4), Arrays.copyOfRange(f, to, to + own * 4),
                            seg + " clip " + c + " mel bin " + bin);
                    for (int x = to + own * 4; x < to + frames * 4; x++) if (f[x] != 0) throw new AssertionError(seg + ": nonzero past the clip");
                }
                assertArrayEquals(Arrays.copyOfRange(emd, c * own * 4, (c + 1) * own * 4),
                        Arrays.copyOfRange(m, clip * frames * 4, clip * frames * 4 + own * 4), seg + " clip " + c + " mask");
                for (int x = clip * frames * 4 + own * 4; x < (clip + 1) * frames * 4; x++)
                    if (m[x] != 0) throw new AssertionError(seg + ": mask past the clip");
            }
            if (e.containsKey("pixel_values_videos")) { // the only video of the data: the pack's video rows are its
                assertArrayEquals(e.get("pixel_values_videos").data(), AudioServeTest.bytes(b.tensor("pixel_values_videos")), seg);
                assertArrayEquals(AudioServeTest.longs(e.get("video_grid_thw")), b.tensor("video_grid_thw").toLongs(), seg);
                assertArrayEquals(e.get("second_per_grid_ts").data(), AudioServeTest.bytes(b.tensor("second_per_grid_ts")), seg);
            }
        }
        assertEquals(clip, (int) features.shape()[0], what + ": every clip of the pack's segments, none else");
        assertEquals(longest, frames, what + ": the pack's frames, its longest clip's");
    }
}
