package dev.stoker.encode.batch;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.AudioPreset;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException;
import dev.stoker.core.batch.Tensor;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.audio.AudioEncoding;
import dev.stoker.encode.audio.AudioTensors;
import dev.stoker.encode.audio.OmniEncoder;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.testkit.FfmpegClips;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * Audio samples (Qwen2.5-Omni, clips the ffmpeg command makes) in a padded batch: {@code input_features} and
 * {@code feature_attention_mask} stack every clip of the batch in sample order, each sample's rows exactly what the
 * encoder made for it alone (bit for bit), widened with zeros to the batch's longest; a batch without a clip carries no
 * audio tensor; the tokens are the samples' own, padded.
 */
@Timeout(120)
@ExtendWith(SharedTokenizer.class)
class AudioBatchTest {
    @TempDir Path tmp;
    private final Map<String, byte[]> files = new HashMap<>();

    @BeforeEach
    void clips() throws Exception {
        FfmpegClips.require();
        make("a.wav", "sine=frequency=440:sample_rate=16000:duration=1.0000625", "-ac", "1", "-c:a", "pcm_s16le");
        make("b.mp3", "sine=frequency=220:sample_rate=48000:duration=2.5", "-ac", "2", "-c:a", "libmp3lame");
        make("c.wav", "sine=frequency=300:sample_rate=16000:duration=1.5", "-ac", "1", "-c:a", "pcm_s16le");
    }

    private void make(String name, String source, String... codec) throws Exception {
        var args = new ArrayList<>(List.of("-f", "lavfi", "-i", source));
        args.addAll(List.of(codec));
        files.put(name, Files.readAllBytes(FfmpegClips.make(tmp.resolve(name), args.toArray(String[]::new))));
    }

    private OmniEncoder.Encoded encode(SampleEncoder e, String json, String id) {
        var s = e.parse(json.getBytes(StandardCharsets.UTF_8), id);
        return e.encodeAudioSample(s, (sid, ref) -> {
            byte[] b = files.get(ref);
            if (b == null) throw new SampleException(sid, SampleException.Stage.FETCH, "no " + ref);
            return b;
        }, null);
    }

    private static String record(String text, String... audios) {
        var list = new StringBuilder();
        for (String a : audios) list.append(list.isEmpty() ? "" : ", ").append('"').append(a).append('"');
        return "{\"messages\": [{\"role\": \"user\", \"content\": \"" + text + "\"}, {\"role\": \"assistant\", \"content\": \"A tone.\"}], "
                + "\"audios\": [" + list + "]}";
    }

    private static Batch assemble(List<EncodedSample> samples) {
        var scheduled = new ScheduledBatch(new dev.stoker.core.ScheduleCursor(0, 0), 0, 0, 0, new int[samples.size()]);
        return new BatchAssembler().assemble(scheduled, java.util.stream.IntStream.range(0, samples.size()).toArray(), samples, List.of());
    }

    @Test
    void eachSamplesRowsAreItsOwnEncodingWidenedWithZeros() {
        for (var pad : AudioEncoding.Pad.values()) {
            var e = new SampleEncoder(EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL)
                    .withAudio(new AudioEncoding(AudioPreset.QWEN2_5_OMNI, pad)), SharedTokenizer.get());
            var encoded = List.of(encode(e, record("<audio>Say?", "a.wav"), "one"),
                    encode(e, record("<audio><audio>Which is longer?", "c.wav", "b.mp3"), "two"),
                    encode(e, record("No audio here."), "text"));
            var samples = encoded.stream().map(x -> x.sample().withAudio(AudioTensors.of(x))).toList();
            assertNull(samples.get(2).audio(), "a sample without a clip carries none");
            var batch = assemble(samples);
            var shape = batch.shape();
            assertEquals(3, shape.audio().clips());
            int t = shape.audio().frames();
            assertEquals(pad == AudioEncoding.Pad.HF ? 30_000 : encoded.get(1).frames(), t, pad + ": the longest sample's frames");
            var tensors = BatchSchema.tensors(batch, 1, e.options().vision()).tensors();
            var names = tensors.stream().map(Tensor::name).toList();
            assertEquals(List.of("input_ids", "labels", "attention_mask", "position_ids", "pixel_values", "image_grid_thw",
                    "input_features", "feature_attention_mask", "sample_index"), names);
            var features = tensors.get(6);
            var mask = tensors.get(7);
            assertArrayEquals(new long[] {3, AudioPreset.MEL_BINS, t}, features.shape());
            assertEquals(Tensor.DType.FLOAT32, features.dtype());
            assertArrayEquals(new long[] {3, t}, mask.shape());
            assertEquals(Tensor.DType.INT32, mask.dtype());
            float[] f = batch.audio().inputFeatures();
            int[] m = batch.audio().featureMask();
            int row = 0;
            for (var x : encoded) {
                for (int k = 0; k < x.clips(); k++, row++) {
                    int own = x.frames();
                    for (int bin = 0; bin < AudioPreset.MEL_BINS; bin++)
                        for (int j = 0; j < t; j++) {
                            int got = Float.floatToRawIntBits(f[(row * AudioPreset.MEL_BINS + bin) * t + j]);
                            int want = j < own ? Float.floatToRawIntBits(x.inputFeatures()[(k * AudioPreset.MEL_BINS + bin) * own + j]) : 0;
                            if (got != want) throw new AssertionError(pad + " " + x.sample().id() + " clip " + k + " bin " + bin + " frame " + j);
                        }
                    for (int j = 0; j < t; j++)
                        assertEquals(j < own ? x.featureMask()[k * own + j] : 0, m[row * t + j], x.sample().id() + " mask " + j);
                }
                // the tokens: the sample's own, padded
                int i = encoded.indexOf(x), len = batch.length(), n = x.sample().length();
                assertArrayEquals(x.sample().inputIds(), java.util.Arrays.copyOfRange(batch.inputIds(), i * len, i * len + n));
                assertArrayEquals(x.sample().labels(), java.util.Arrays.copyOfRange(batch.labels(), i * len, i * len + n));
                for (int c = 0; c < 3; c++)
                    assertArrayEquals(java.util.Arrays.copyOfRange(x.sample().positionIds(), c * n, c * n + n),
                            java.util.Arrays.copyOfRange(batch.positionIds(), (c * 3 + i) * len, (c * 3 + i) * len + n));
            }
            assertTrue(shape.sizeBytes() >= 4L * 3 * AudioPreset.MEL_BINS * t, "the layout holds the features");
            // a batch of the text-only sample alone: no audio tensor at all
            var alone = assemble(List.of(samples.get(2)));
            assertNull(alone.audio());
            assertTrue(BatchSchema.names(alone.shape()).stream().noneMatch(nm -> nm.startsWith("input_features") || nm.startsWith("feature_")));
        }
    }

    /**
     * Qwen2-Audio's and Qwen3-Omni's batches (issue 32): {@code position_ids} int64 (B, L) and float32 (3, B, L), each
     * sample's rows its own positions bit for bit and the padding 1; the dummy image under Qwen3-Omni only (its thinker has a vision tower); a
     * batch of no sample keeps the family's layout.
     */
    @Test
    void qwen2AudioAndQwen3OmniBatchesCarryTheirFamilysPositions() {
        for (var family : List.of(AudioPreset.QWEN2_AUDIO, AudioPreset.QWEN3_OMNI)) {
            boolean qwen3 = family == AudioPreset.QWEN3_OMNI;
            var options = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withAudio(new AudioEncoding(family, AudioEncoding.Pad.VALID));
            assertEquals(EncodeOptions.TextOnlyPolicy.DUMMY_IMAGE, options.textOnly(), "the default: Qwen3-Omni's thinker takes it, Qwen2-Audio none");
            var e = new SampleEncoder(options, SharedTokenizer.get());
            var encoded = List.of(encode(e, record("<audio>Say?", "a.wav"), "one"),
                    encode(e, record("<audio><audio>Which is longer?", "c.wav", "b.mp3"), "two"),
                    encode(e, record("No audio here, and a longer text than the others have."), "text"));
            var samples = new ArrayList<EncodedSample>();
            for (var x : encoded) {
                var s = x.sample().withAudio(AudioTensors.of(x));
                samples.add(x.floatPositions() == null ? s : s.withFloatPositions(x.floatPositions()));
            }
            var scheduled = new ScheduledBatch(new dev.stoker.core.ScheduleCursor(0, 0), 0, 0, 0, new int[3]);
            var assembler = new BatchAssembler(options);
            var batch = assembler.assemble(scheduled, new int[] {0, 1, 2}, samples, List.of());
            assertEquals(qwen3 ? BatchShape.Positions.MROPE_FLOAT : BatchShape.Positions.TEXT, batch.shape().positions());
            // Qwen3-Omni's thinker has a vision tower: a batch without image or video gets the dummy image (docs/audio.md)
            assertEquals(qwen3 ? 1 : 0, batch.shape().images(), family + ": the dummy image only where the model has a vision tower");
            if (qwen3) {
                int n0 = encoded.get(0).sample().length(), dl = batch.shape().length();
                long[] ids = batch.inputIds(), mask = batch.attentionMask();
                assertEquals(dev.stoker.text.QwenTokenIds.IMAGE_PAD, ids[n0 + 1], "the dummy's tokens after the first sample's");
                for (int k = n0; k < dl; k++) assertEquals(0, mask[k], "the dummy's tokens are not attended, at " + k);
            }
            var tensors = BatchSchema.tensors(batch, 1, options.vision()).tensors();
            var pos = tensors.stream().filter(t -> t.name().equals("position_ids")).findFirst().orElseThrow();
            int len = batch.shape().length();
            assertEquals(qwen3 ? Tensor.DType.FLOAT32 : Tensor.DType.INT64, pos.dtype(), family.toString());
            assertArrayEquals(qwen3 ? new long[] {3, 3, len} : new long[] {3, len}, pos.shape(), family + " position_ids shape");
            assertTrue(BatchSchema.plan(batch.shape(), options.vision().rowLength()).totalBytes() > 0);
            int padded = 0;
            for (int i = 0; i < 3; i++) {
                var x = encoded.get(i);
                int n = x.sample().length();
                if (n < len) padded++;
                if (qwen3) {
                    float[] all = pos.toFloats();
                    for (int c = 0; c < 3; c++) {
                        float[] row = java.util.Arrays.copyOfRange(all, (c * 3 + i) * len, (c * 3 + i + 1) * len);
                        assertArrayEquals(java.util.Arrays.copyOfRange(x.floatPositions(), c * n, c * n + n),
                                java.util.Arrays.copyOfRange(row, 0, n), family + " sample " + i + " row " + c);
                        for (int k = n; k < len; k++) assertEquals(1f, row[k], family + " sample " + i + " pad at " + k);
                    }
                } else {
                    long[] row = java.util.Arrays.copyOfRange(pos.toLongs(), i * len, (i + 1) * len);
                    assertEquals(1, x.positionRows());
                    assertArrayEquals(x.sample().positionIds(), java.util.Arrays.copyOfRange(row, 0, n), family + " sample " + i);
                    assertArrayEquals(java.util.stream.LongStream.range(0, n).toArray(), java.util.Arrays.copyOfRange(row, 0, n), "0 … L−1");
                    for (int k = n; k < len; k++) assertEquals(1L, row[k], family + " sample " + i + " pad at " + k);
                }
            }
            assertTrue(padded >= 2, family + ": two of the three samples are padded (three where the dummy makes the first the longest)");
            // every sample skipped: the batch keeps the family's position layout
            var empty = assembler.assemble(new ScheduledBatch(new dev.stoker.core.ScheduleCursor(0, 0), 0, 0, 0, new int[1]), new int[0],
                    List.of(), List.of(new SkippedSample("gone", 0, SampleException.Stage.DECODE, "a cause")));
            assertEquals(batch.shape().positions(), empty.shape().positions());
            // a sample of another family's layout is refused, naming the layouts
            var other = encode(new SampleEncoder(EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL)
                    .withAudio(new AudioEncoding(AudioPreset.QWEN2_5_OMNI, AudioEncoding.Pad.VALID)), SharedTokenizer.get()), record("Hi."), "vl");
            var err = assertThrows(IllegalArgumentException.class, () -> assembler.assemble(new ScheduledBatch(
                    new dev.stoker.core.ScheduleCursor(0, 0), 0, 0, 0, new int[1]), new int[] {0}, List.of(other.sample()), List.of()));
            assertTrue(err.getMessage().contains("MROPE"), err.getMessage());
        }
    }

    /**
     * A pack (issue 32, {@link PackAssembler}) stacks its segments' clips as a padded batch stacks its samples': row by row
     * each clip's own features widened with zeros to the pack's longest, in segment order, the mask likewise; each
     * segment's tokens and M-RoPE rows are its own; the layout's table lists the audio tensors after the vision ones.
     */
    @Test
    void aPackStacksItsSegmentsClipsInSegmentOrder() {
        var e = new SampleEncoder(EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL)
                .withAudio(new AudioEncoding(AudioPreset.QWEN2_5_OMNI, AudioEncoding.Pad.VALID)), SharedTokenizer.get());
        var encoded = List.of(encode(e, record("<audio><audio>Which is longer?", "c.wav", "b.mp3"), "two"),
                encode(e, record("No audio here."), "text"), encode(e, record("<audio>Say?", "a.wav"), "one"));
        var samples = encoded.stream().map(x -> x.sample().withAudio(AudioTensors.of(x))).toList();
        var scheduled = new ScheduledBatch(new dev.stoker.core.ScheduleCursor(0, 0), 0, 0, 0, new int[] {7, 3, 5});
        var pack = new PackAssembler(e.options(), 8).assemble(scheduled, new int[] {7, 3, 5}, samples, List.of(), false);
        var shape = pack.shape();
        assertTrue(shape.packed());
        assertEquals(3, shape.audio().clips());
        int t = shape.audio().frames();
        assertEquals(encoded.get(0).frames(), t, "the longest clip's frames");
        var names = BatchSchema.tensors(pack, 1, e.options().vision()).tensors().stream().map(Tensor::name).toList();
        assertEquals(List.of("input_ids", "labels", "position_ids", "pixel_values", "image_grid_thw", "input_features",
                "feature_attention_mask", "sample_index", "cu_seqlens", "max_seqlen", "seg_ids"), names.subList(0, 11));
        float[] f = pack.audio().inputFeatures();
        int[] m = pack.audio().featureMask();
        int row = 0, at = 0, len = pack.length();
        for (var x : encoded) {
            for (int k = 0; k < x.clips(); k++, row++) {
                int own = x.frames();
                for (int bin = 0; bin < AudioPreset.MEL_BINS; bin++)
                    for (int j = 0; j < t; j++) {
                        int got = Float.floatToRawIntBits(f[(row * AudioPreset.MEL_BINS + bin) * t + j]);
                        int want = j < own ? Float.floatToRawIntBits(x.inputFeatures()[(k * AudioPreset.MEL_BINS + bin) * own + j]) : 0;
                        if (got != want) throw new AssertionError(x.sample().id() + " clip " + k + " bin " + bin + " frame " + j);
                    }
                for (int j = 0; j < t; j++) assertEquals(j < own ? x.featureMask()[k * own + j] : 0, m[row * t + j], x.sample().id() + " mask " + j);
            }
            int n = x.sample().length();
            assertArrayEquals(x.sample().inputIds(), java.util.Arrays.copyOfRange(pack.inputIds(), at, at + n), x.sample().id());
            assertArrayEquals(x.sample().labels(), java.util.Arrays.copyOfRange(pack.labels(), at, at + n), x.sample().id());
            for (int c = 0; c < 3; c++)
                assertArrayEquals(java.util.Arrays.copyOfRange(x.sample().positionIds(), c * n, c * n + n),
                        java.util.Arrays.copyOfRange(pack.positionIds(), (c + 1) * len + at, (c + 1) * len + at + n), x.sample().id() + " row " + (c + 1));
            at += n;
        }
        assertEquals(3, row);
        // a pack of the text-only sample alone: no audio tensor
        var alone = new PackAssembler(e.options(), 1).assemble(new ScheduledBatch(new dev.stoker.core.ScheduleCursor(0, 0), 0, 0, 0,
                new int[] {3}), new int[] {3}, List.of(samples.get(1)), List.of(), false);
        assertNull(alone.audio());
        assertTrue(BatchSchema.names(alone.shape()).stream().noneMatch(nm -> nm.equals("input_features")));
    }
}
