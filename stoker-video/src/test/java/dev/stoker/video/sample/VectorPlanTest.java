package dev.stoker.video.sample;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.video.ffmpeg.NativeTools;
import dev.stoker.video.index.FrameIndexer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The plan of every video of every case of the Qwen-VL video vectors ({@code ../shared/vectors/qwen-vl-video}) from
 * the metadata the vectors were made with (decoded frame count, average fps, stored size) and the case's options and
 * per-item keys: frame indices, resized size, grid, sampled fps, {@code second_per_grid_t}, Qwen3 timestamps and their
 * text, exactly as transformers 5.18.0 gave them (case.json) and as 4.57.6 gives them ({@code vectors-4.57.json},
 * from the reference with {@code compat="4.57"}); d16 refused. Where FFmpeg is installed, the metadata is also taken
 * from each clip's frame index ({@link VideoMetadata#of}) and must equal PyAV's. Skipped, saying so, where the shared
 * folder is absent.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class VectorPlanTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    static Path vectors() {
        String prop = System.getProperty("stoker.shared.dir");
        Path v = (prop == null ? Path.of("../shared") : Path.of(prop)).resolve("vectors/qwen-vl-video");
        Assumptions.assumeTrue(Files.isRegularFile(v.resolve("MANIFEST.json")), "no Qwen-VL video vectors at " + v + " (-Dstoker.shared.dir)");
        return v;
    }

    /** The video items of a sample in message order (HF messages layout). */
    static List<JsonNode> videoItems(JsonNode sample) {
        List<JsonNode> out = new ArrayList<>();
        for (JsonNode msg : sample.path("messages"))
            for (JsonNode part : msg.path("content"))
                if (part.isObject() && "video".equals(part.path("type").asText())) out.add(part);
        return out;
    }

    /** float(Fraction("30000/1001")) as PyAV gives it: the correctly rounded quotient. */
    static double rate(String r) {
        int slash = r.indexOf('/');
        return slash < 0 ? Double.parseDouble(r) : (double) Integer.parseInt(r.substring(0, slash)) / Integer.parseInt(r.substring(slash + 1));
    }

    static VideoMetadata metadata(JsonNode manifestVideo) {
        double fps = rate(manifestVideo.path("average_rate").asText());
        assertEquals(manifestVideo.path("average_fps").asDouble(), fps, 0.0, "average_rate as float(Fraction)");
        return new VideoMetadata(manifestVideo.path("decoded_frames").asInt(), fps, manifestVideo.path("width").asInt(),
                manifestVideo.path("height").asInt());
    }

    @Test
    void everyCaseUnder518And457() throws Exception {
        Path vec = vectors();
        JsonNode manifest = JSON.readTree(vec.resolve("MANIFEST.json").toFile()).path("videos");
        JsonNode v457 = VideoPlanFixtureTest.load("vectors-4.57.json").path("cases");
        List<String> diffs = new ArrayList<>();
        int cases = 0, videos = 0;
        List<Path> dirs;
        try (Stream<Path> s = Files.list(vec)) {
            dirs = s.filter(p -> Files.isRegularFile(p.resolve("case.json"))).sorted().toList();
        }
        for (Path dir : dirs) {
            String id = dir.getFileName().toString();
            JsonNode c = JSON.readTree(dir.resolve("case.json").toFile());
            List<JsonNode> items = videoItems(JSON.readTree(dir.resolve("sample.json").toFile()));
            cases++;
            for (TransformersCompat compat : TransformersCompat.values()) {
                var planner = new VideoPlanner(ProcessorPreset.fromName(c.path("family").asText()),
                        VideoSampler.fromName(c.path("sampler").asText()), compat, VideoPlanFixtureTest.options(c.path("options")));
                for (int k = 0; k < items.size(); k++) {
                    JsonNode item = items.get(k);
                    String file = item.path("video").asText(), where = id + " " + compat + " video " + k;
                    VideoItemOptions keys = VideoItemOptions.fromJson(item, id + " video item " + k);
                    VideoPlan p;
                    try {
                        p = planner.plan(file, metadata(manifest.path(file)), keys);
                    } catch (VideoPlanException e) {
                        String expected = c.path("expected_error").asText(null);
                        if (expected == null) diffs.add(where + ": refused: " + e.getMessage());
                        else if (!e.getMessage().contains("torch.arange(0, 17, 17/14) has 15 entries, the last (17) is out of range"))
                            diffs.add(where + ": refused with '" + e.getMessage() + "', expected " + expected);
                        continue;
                    }
                    if (c.has("expected_error")) {
                        diffs.add(where + ": planned " + p + ", expected " + c.path("expected_error").asText());
                        continue;
                    }
                    videos++;
                    JsonNode exp = compat == TransformersCompat.V5_18 ? expected518(c.path("videos").get(k)) : v457.path(id).get(k);
                    diffs.addAll(VideoPlanFixtureTest.compare(where, p, exp));
                }
            }
        }
        assertEquals(16, cases);
        assertEquals(List.of(), diffs);
        assertEquals(2 * 16, videos); // 15 cases, d14 with two videos, under two versions
    }

    /** case.json's per-video record in the fixtures' shape. */
    private static JsonNode expected518(JsonNode v) {
        ObjectNode o = JSON.createObjectNode();
        o.set("indices", v.path("frame_indices"));
        o.set("resized", v.path("resized_hw"));
        o.set("grid", v.path("video_grid_thw"));
        o.set("sampled_fps", v.path("sampled_fps"));
        if (!v.path("second_per_grid_t").isNull()) o.set("second_per_grid_t", v.path("second_per_grid_t"));
        if (!v.path("timestamps").isNull()) {
            o.set("timestamps", v.path("timestamps"));
            o.set("timestamp_text", v.path("timestamp_text"));
        }
        return o;
    }

    /** Shapes before decoding: each clip's frame index gives the metadata PyAV gave (count, average fps, size). */
    @Test
    void metadataFromTheFrameIndexEqualsPyAvs() throws Exception {
        Path vec = vectors();
        NativeTools.requireLibraries();
        JsonNode manifest = JSON.readTree(vec.resolve("MANIFEST.json").toFile()).path("videos");
        List<String> diffs = new ArrayList<>();
        int clips = 0;
        for (var e : manifest.properties()) {
            if (!e.getValue().has("codec")) continue;
            clips++;
            VideoMetadata ours;
            try (var source = SeekableByteSource.of(vec.resolve("videos").resolve(e.getKey()))) {
                ours = VideoMetadata.of(new FrameIndexer().index(source), e.getKey());
            }
            VideoMetadata pyav = metadata(e.getValue());
            VideoMetadata decodeSide = new VideoMetadata(ours.frames(), ours.averageFps(), ours.width(), ours.height());
            if (!decodeSide.equals(pyav)) diffs.add(e.getKey() + ": index " + ours + ", PyAV " + pyav);
            if (ours.headerFrames() != e.getValue().path("header_frames").asLong())
                diffs.add(e.getKey() + ": header frames " + ours.headerFrames() + ", PyAV " + e.getValue().path("header_frames"));
        }
        assertEquals(10, clips);
        assertEquals(List.of(), diffs);
    }
}
