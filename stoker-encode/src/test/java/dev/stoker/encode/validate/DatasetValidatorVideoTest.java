package dev.stoker.encode.validate;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.encode.video.VideoPreprocessor;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.testkit.SmallJpegDataset;
import dev.stoker.video.index.FrameIndexStore;
import java.io.File;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * {@link DatasetValidator} with video on (issue 29), over LLaMA-Factory's layout: a JSON array of records with
 * {@code "videos"} and {@code <video>} placeholders, media paths relative to the manifest's folder, clips made here by
 * the ffmpeg CLI as the demo's are (H.264 in MP4 at 25 fps tagged BT.709 and at 24000/1001 fps, MPEG-4 in AVI at
 * 359/12 fps), an image beside a video, a text-only record. Every record kept, and each length the
 * {@code input_ids} length {@link SampleEncoder#encode(dev.stoker.text.ChatSample, SampleEncoder.ImageSource,
 * VideoPreprocessor.VideoSource)} gives, with Σ t·h·w / 4 video pads; the length index holds each video's t and
 * t·h·w. A missing video and a truncated one are their records' errors naming the video; LLaMA-Factory's audio layout
 * is an error under every Qwen-VL processor; without video in the options, video records stay refused. Needs the
 * ffmpeg CLI and FFmpeg's libraries ({@code -Dstoker.video.skipWithoutFfmpeg=true} skips instead of failing).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class DatasetValidatorVideoTest {
    static final long VIDEO_PAD = 151656;
    static final long IMAGE_PAD = 151655;
    @TempDir static Path dir;
    static Path manifest, broken, audio;

    /** Records of {@link #manifest}. */
    static final int ONE = 0, TWO = 1, MIXED = 2, TEXT = 3, RECORDS = 4;
    /** Records of {@link #broken}. */
    static final int GOOD = 0, MISSING = 1, TRUNCATED = 2;

    @BeforeAll
    static void clips() throws Exception {
        if (!onPath("ffmpeg") || dev.stoker.video.ffmpeg.Ffmpeg.unavailableReason() != null) {
            String message = "the ffmpeg command or FFmpeg 5.1's libraries are missing (" + dev.stoker.video.ffmpeg.Ffmpeg.unavailableReason()
                    + "): install the Debian package ffmpeg (./stoker test installs it)";
            if (Boolean.getBoolean("stoker.video.skipWithoutFfmpeg")) Assumptions.abort(message);
            fail(message);
        }
        Path data = Files.createDirectories(dir.resolve("mllm_demo_data"));
        ffmpeg(data.resolve("1.mp4"), "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25:duration=2", "-c:v", "libx264",
                "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-color_primaries", "bt709", "-color_trc", "bt709", "-colorspace", "bt709");
        ffmpeg(data.resolve("2.mp4"), "-f", "lavfi", "-i", "testsrc2=size=256x144:rate=24000/1001:duration=1.5", "-c:v", "libx264",
                "-preset", "ultrafast", "-pix_fmt", "yuv420p");
        ffmpeg(data.resolve("3.avi"), "-f", "lavfi", "-i", "testsrc2=size=176x144:rate=359/12:duration=1.5", "-c:v", "mpeg4");
        Files.write(data.resolve("1.jpg"), SmallJpegDataset.jpeg(320, 240, 1));
        byte[] whole = Files.readAllBytes(data.resolve("1.mp4"));
        Files.write(data.resolve("cut.mp4"), Arrays.copyOf(whole, whole.length / 2)); // the moov box, at the end, cut away
        manifest = Files.writeString(dir.resolve("mllm_video_demo.json"), """
            [
              {"messages": [{"content": "<video>Why is this video funny?", "role": "user"},
                            {"content": "Because a baby is reading, and he is so cute!", "role": "assistant"}],
               "videos": ["mllm_demo_data/1.mp4"]},
              {"messages": [{"content": "<video>What is she doing?", "role": "user"},
                            {"content": "She is cooking.", "role": "assistant"},
                            {"content": "<video>And now?", "role": "user"},
                            {"content": "Still cooking.", "role": "assistant"}],
               "videos": ["mllm_demo_data/3.avi", "mllm_demo_data/2.mp4"]},
              {"messages": [{"content": "<image>Where is this?<video>And this?", "role": "user"},
                            {"content": "Both are test patterns.", "role": "assistant"}],
               "images": ["mllm_demo_data/1.jpg"], "videos": ["mllm_demo_data/2.mp4"]},
              {"messages": [{"content": "Say hello.", "role": "user"}, {"content": "Hello.", "role": "assistant"}]}
            ]
            """);
        broken = Files.writeString(dir.resolve("broken.json"), """
            [
              {"messages": [{"content": "<video>What moves?", "role": "user"}, {"content": "Colours.", "role": "assistant"}],
               "videos": ["mllm_demo_data/3.avi"]},
              {"messages": [{"content": "<video>What moves?", "role": "user"}, {"content": "Nothing.", "role": "assistant"}],
               "videos": ["mllm_demo_data/nowhere.mp4"]},
              {"messages": [{"content": "<video>What moves?", "role": "user"}, {"content": "Half of it.", "role": "assistant"}],
               "videos": ["mllm_demo_data/cut.mp4"]}
            ]
            """);
        audio = Files.writeString(dir.resolve("mllm_audio_demo.json"), """
            [
              {"messages": [{"content": "<audio>What's that sound?", "role": "user"},
                            {"content": "It is the sound of glass shattering.", "role": "assistant"}],
               "audios": ["mllm_demo_data/1.mp3"]},
              {"messages": [{"content": "<audio>What can you hear?", "role": "user"},
                            {"content": "A woman is coughing.", "role": "assistant"}],
               "audios": ["mllm_demo_data/2.wav"]}
            ]
            """);
    }

    static boolean onPath(String tool) {
        for (String d : System.getenv().getOrDefault("PATH", "").split(File.pathSeparator))
            if (Files.isExecutable(Path.of(d, tool))) return true;
        return false;
    }

    static void ffmpeg(Path out, String... args) throws Exception {
        var cmd = new ArrayList<>(List.of("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y"));
        cmd.addAll(List.of(args));
        cmd.add(out.toString());
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null"))).start();
        String text = new String(p.getInputStream().readAllBytes());
        if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) fail("ffmpeg failed: " + text);
    }

    static EncodeOptions options(ProcessorPreset preset) { return EncodeOptions.defaults(preset).withVideo(VideoEncoding.defaults()); }

    static ValidationReport validate(Path manifest, EncodeOptions options) throws Exception {
        try (var objects = ObjectSources.open(manifest.toString(), SourceConfig.defaults())) {
            var source = FeedSource.of(objects, null);
            return DatasetValidator.validate(source.records(), source, SharedTokenizer.get(), new DatasetValidator.Settings(options, 2, 4, 3));
        }
    }

    /** Every record kept; each length is the encoder's input_ids length, with Σ t·h·w / 4 video pads; the index holds t and t·h·w. */
    @ParameterizedTest
    @EnumSource(value = ProcessorPreset.class, names = {"QWEN2_VL", "QWEN2_5_VL", "QWEN3_VL"}) // the audio families: AudioCliTest
    void aLlamaFactoryVideoManifestIsKeptWithTheEncodersLengths(ProcessorPreset preset) throws Exception {
        var options = options(preset);
        var report = validate(manifest, options);
        assertEquals(RECORDS, report.samples());
        assertEquals(0, report.errors(), report.causes().toString());
        assertEquals(0, report.filtered(), report.causes().toString());
        assertEquals(4, report.videos(), "videos named");
        assertEquals(1, report.images());

        var encoder = new SampleEncoder(options, SharedTokenizer.get());
        try (var objects = ObjectSources.open(manifest.toString(), SourceConfig.defaults())) {
            var source = FeedSource.of(objects, null);
            var records = source.records();
            for (int i = 0; i < RECORDS; i++) {
                int record = i;
                var sample = encoder.parse(records.record(i).join().json(), records.id(i));
                VideoPreprocessor.VideoSource videos = (id, ref) -> source.openVideo(record, id, ref);
                var encoded = encoder.encode(sample, (id, ref) -> source.fetch(id, ref).join(), videos);
                assertEquals(encoded.inputIds().length, report.lengths()[i], preset + " record " + i + ": validate's length is encode's");
                long[] grid = encoded.videos().videoGridThw();
                int[] patches = report.videoPatches()[i] == null ? new int[0] : report.videoPatches()[i];
                int[] groups = report.videoGroups()[i] == null ? new int[0] : report.videoGroups()[i];
                assertEquals(sample.videos().size(), grid.length / 3, "every video kept");
                assertEquals(grid.length / 3, patches.length, preset + " record " + i + ": videos in the report");
                long pads = 0, rows = 0;
                for (long id : encoded.inputIds()) if (id == VIDEO_PAD) pads++;
                for (int k = 0; k < patches.length; k++) {
                    assertEquals(grid[3 * k] * grid[3 * k + 1] * grid[3 * k + 2], patches[k], "record " + i + " video " + k + ": t·h·w");
                    assertEquals(grid[3 * k], groups[k], "record " + i + " video " + k + ": t");
                    rows += patches[k];
                }
                assertEquals(rows / 4, pads, preset + " record " + i + ": Σ t·h·w / 4 video pads");
                assertEquals(encoded.videos().rows(), rows);
                if (i == MIXED) assertTrue(Arrays.stream(encoded.inputIds()).anyMatch(t -> t == IMAGE_PAD) && report.imagePatches()[i].length == 1);
                if (i == TEXT) assertEquals(0, patches.length);
            }
        }

        // the length index, as validate writes it: each video's t and t·h·w, read back; its shapes carry them to the planner
        var settings = LengthIndex.settings(options, "bundled");
        assertTrue(settings.containsKey("video"), "video settings decide lengths: " + settings);
        Path file = LengthIndex.of(settings, report).write(dir.resolve("lengths-" + preset));
        var back = LengthIndex.read(file);
        assertArrayEquals(report.lengths(), back.lengths());
        assertEquals(2, back.videos(TWO));
        assertArrayEquals(report.videoPatches()[TWO], back.videoPatches(TWO));
        assertArrayEquals(report.videoGroups()[TWO], back.videoGroups(TWO));
        assertEquals(0, back.videos(TEXT));
        var shapes = ShapeIndexes.of(back);
        SampleShape mixed = shapes.shape(MIXED);
        assertEquals(report.imagePatches()[MIXED][0] + report.videoPatches()[MIXED][0], mixed.patches(), "image and video rows");
        assertArrayEquals(report.videoGroups()[MIXED], mixed.videoGroups());
        assertEquals(ShapeIndexes.of(report).shape(TWO), shapes.shape(TWO));
        byte[] raw = Files.readAllBytes(file);
        assertEquals("STKLEN04", new String(raw, 0, 8, StandardCharsets.US_ASCII));
        var le = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN);
        int table = 12 + le.getInt(8);
        assertEquals(2, le.getInt(table + 20 * TWO + 12), "the videos column");
        int images = back.imagePatches().length, videosBefore = back.videos(ONE);
        int at = table + 20 * RECORDS + 4 * images + 8 * videosBefore; // TWO's first video: (t, t·h·w)
        assertEquals(report.videoGroups()[TWO][0], le.getInt(at));
        assertEquals(report.videoPatches()[TWO][0], le.getInt(at + 4));
        assertEquals(table + 20 * RECORDS + 4 * images + 8 * 4, raw.length);
    }

    static ValidationReport validate(Path manifest, EncodeOptions options, FrameIndexStore store) throws Exception {
        try (var objects = ObjectSources.open(manifest.toString(), SourceConfig.defaults())) {
            var source = FeedSource.of(objects, null);
            return DatasetValidator.validate(source.records(), source, SharedTokenizer.get(),
                    new DatasetValidator.Settings(options, 2, 4, 3).withFrameIndexes(store));
        }
    }

    static List<Path> files(Path dir) throws Exception {
        try (var s = Files.list(dir)) {
            return s.sorted().toList();
        }
    }

    /**
     * Frame indexes kept in a folder: one file per distinct video's bytes (2.mp4 is named twice), found the next time
     * with the same lengths; a file cut short is indexed anew and replaced; a broken video leaves none; the same bytes
     * under another name have the same key.
     */
    @Test
    void frameIndexesKeptInAFolderAreFoundTheNextTime() throws Exception {
        var options = options(ProcessorPreset.QWEN2_VL);
        Path frames = dir.resolve("store/frames");
        var store = FrameIndexStore.of(frames);
        var first = validate(manifest, options, store);
        assertEquals(0, first.errors(), first.causes().toString());
        assertEquals(4, store.hits() + store.misses());
        assertTrue(store.misses() >= 3, "three distinct videos indexed: " + store.misses());
        assertEquals(3, files(frames).size(), "one file per distinct video");
        var again = FrameIndexStore.of(frames);
        var second = validate(manifest, options, again);
        assertEquals(4, again.hits(), "every video's index found");
        assertEquals(0, again.misses());
        assertArrayEquals(first.lengths(), second.lengths());
        assertArrayEquals(first.videoPatches()[TWO], second.videoPatches()[TWO]);

        for (Path f : files(frames)) Files.write(f, Arrays.copyOf(Files.readAllBytes(f), 20)); // cut short
        var cut = FrameIndexStore.of(frames);
        assertArrayEquals(first.lengths(), validate(manifest, options, cut).lengths());
        assertTrue(cut.misses() >= 3, "indexed anew: " + cut.misses());
        for (Path f : files(frames)) dev.stoker.video.index.FrameIndex.fromBytes(Files.readAllBytes(f)); // replaced, whole

        Path brokenFrames = dir.resolve("store/broken-frames");
        var report = validate(broken, options, FrameIndexStore.of(brokenFrames));
        assertEquals(2, report.errors());
        assertEquals(1, files(brokenFrames).size(), "only 3.avi's: a broken video leaves no index");

        Path data = dir.resolve("mllm_demo_data");
        Files.copy(data.resolve("1.mp4"), data.resolve("copy-of-1.mp4"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        try (var a = dev.stoker.core.io.SeekableByteSource.of(data.resolve("1.mp4"));
             var b = dev.stoker.core.io.SeekableByteSource.of(data.resolve("copy-of-1.mp4"));
             var c = dev.stoker.core.io.SeekableByteSource.of(data.resolve("2.mp4"))) {
            assertEquals(store.key(a), store.key(b), "the same bytes, one key");
            assertNotEquals(store.key(a), store.key(c));
            assertNotEquals(store.key(a), new FrameIndexStore(frames, "libavformat 60.3.100").key(a), "another libavformat, another key");
        }
    }

    /**
     * {@code --max-seq-len}: under reject a sample over it is filtered (counted apart, naming its videos); under truncate
     * the length and the videos kept are encode's.
     */
    @ParameterizedTest
    @EnumSource(value = ProcessorPreset.class, names = {"QWEN2_VL", "QWEN3_VL"})
    void theSequenceLimitFiltersOrTruncatesAsEncodeDoes(ProcessorPreset preset) throws Exception {
        int[] full = validate(manifest, options(preset)).lengths();
        int limit = full[TWO] - 40; // inside TWO's second video (64 or 90 tokens, then some 12 of text): its first is kept
        var reject = validate(manifest, options(preset).withSequenceLimit(limit, dev.stoker.text.TruncationPolicy.REJECT));
        assertEquals(0, reject.errors(), reject.causes().toString());
        long over = Arrays.stream(full).filter(n -> n > limit).count();
        assertEquals(over, reject.filtered());
        for (var c : reject.causes()) {
            assertEquals("over --max-seq-len", c.key().reason());
            for (var e : c.examples()) assertTrue(e.message().contains("video(s)"), e.message());
        }
        var truncate = options(preset).withSequenceLimit(limit, dev.stoker.text.TruncationPolicy.TRUNCATE);
        var report = validate(manifest, truncate);
        assertEquals(0, report.errors() + report.filtered(), report.causes().toString());
        var encoder = new SampleEncoder(truncate, SharedTokenizer.get());
        try (var objects = ObjectSources.open(manifest.toString(), SourceConfig.defaults())) {
            var source = FeedSource.of(objects, null);
            var records = source.records();
            for (int i = 0; i < RECORDS; i++) {
                int record = i;
                var sample = encoder.parse(records.record(i).join().json(), records.id(i));
                var encoded = encoder.encode(sample, (id, ref) -> source.fetch(id, ref).join(), (id, ref) -> source.openVideo(record, id, ref));
                assertEquals(encoded.inputIds().length, report.lengths()[i], preset + " record " + i);
                int[] patches = report.videoPatches()[i] == null ? new int[0] : report.videoPatches()[i];
                assertEquals(encoded.videos().videos(), patches.length, preset + " record " + i + ": videos kept");
                assertEquals(encoded.videos().rows(), Arrays.stream(patches).sum());
            }
        }
        assertTrue(report.lengths()[TWO] <= limit && report.videoPatches()[TWO].length == 1, "TWO keeps its first video: "
                + Arrays.toString(report.videoPatches()[TWO]));
    }

    /** A missing video and a truncated one: their records' errors, naming the video and the cause; the good one kept. */
    @Test
    void aMissingAndATruncatedVideoAreTheirRecordsErrors() throws Exception {
        var report = validate(broken, options(ProcessorPreset.QWEN2_5_VL));
        assertEquals(2, report.errors(), report.causes().toString());
        assertEquals(0, report.filtered());
        assertTrue(report.lengths()[GOOD] > 0);
        assertEquals(LengthIndex.ERROR, report.lengths()[MISSING]);
        assertEquals(LengthIndex.ERROR, report.lengths()[TRUNCATED]);
        assertEquals(null, report.videoPatches()[MISSING]);
        var reasons = report.causes().stream().map(c -> c.key().stage() + " " + c.key().reason()).sorted().toList();
        assertEquals(List.of("DECODE video: cannot open the container", "FETCH video: file not found"), reasons,
                "counted by cause, whatever the video's name");
        var byIndex = new java.util.HashMap<Integer, String>();
        for (var c : report.causes()) for (var e : c.examples()) byIndex.put(e.index(), c.key().stage() + " " + e.sampleId() + ": " + e.message());
        String missing = byIndex.get(MISSING), cut = byIndex.get(TRUNCATED);
        assertTrue(missing.startsWith("FETCH broken.json[1]") && missing.contains("video mllm_demo_data/nowhere.mp4")
                && missing.contains("file not found"), missing);
        assertTrue(cut.contains("broken.json[2]") && cut.contains("mllm_demo_data/cut.mp4"), cut);
    }

    /** LLaMA-Factory's audio layout: every record an error naming the audio, under every Qwen-VL processor, video on or off. */
    @ParameterizedTest
    @EnumSource(value = ProcessorPreset.class, names = {"QWEN2_VL", "QWEN2_5_VL", "QWEN3_VL"}) // the audio families: AudioCliTest
    void theAudioLayoutIsAnErrorUnderEveryProcessor(ProcessorPreset preset) throws Exception {
        for (var options : List.of(options(preset), EncodeOptions.defaults(preset))) {
            var report = validate(audio, options);
            assertEquals(2, report.errors(), preset + ": " + report.causes());
            assertEquals(0, report.filtered());
            for (var c : report.causes()) {
                assertEquals(SampleException.Kind.ERROR, c.key().kind());
                for (var e : c.examples()) assertTrue(e.message().contains("audio"), e.message());
            }
        }
    }

    /** Without video in the options the video records are refused as before; the text-only one is kept. */
    @Test
    void withoutVideoTheVideoRecordsStayRefused() throws Exception {
        var options = EncodeOptions.defaults(ProcessorPreset.QWEN2_VL);
        var report = validate(manifest, options);
        assertEquals(3, report.errors(), report.causes().toString());
        assertTrue(report.lengths()[TEXT] > 0);
        for (var c : report.causes()) for (var e : c.examples()) assertTrue(e.message().contains("video"), e.message());
        assertTrue(!LengthIndex.settings(options, "bundled").containsKey("video"), "no video: the settings (and key) of before");
        assertNotEquals(LengthIndex.key("00", LengthIndex.settings(options, "bundled")),
                LengthIndex.key("00", LengthIndex.settings(options(ProcessorPreset.QWEN2_VL), "bundled")));
    }
}
