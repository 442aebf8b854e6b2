package dev.stoker.video.index;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.video.ffmpeg.NativeTools;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The index of each clip of the Qwen-VL video vectors ({@code ../shared/vectors/qwen-vl-video}) against the
 * metadata PyAV 18.1 gave when they were made (its MANIFEST.json): container, codec, size, pixel format, time base,
 * average rate, header frame count, and the real count (packets and decoded frames, equal on every clip). Skipped,
 * saying so, where the shared folder is absent (a clean clone: the clips are not vendored yet).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class VectorClipsIndexTest {
    @Test
    void everyClipMatchesPyAvsMetadata() throws Exception {
        Path vectors = NativeTools.videoVectorsOrSkip();
        NativeTools.requireLibraries();
        JsonNode videos = new ObjectMapper().readTree(vectors.resolve("MANIFEST.json").toFile()).path("videos");
        List<String> differences = new ArrayList<>();
        int clips = 0;
        for (Map.Entry<String, JsonNode> e : videos.properties()) {
            JsonNode m = e.getValue();
            if (!m.has("codec")) continue; // the image of the mixed cases
            clips++;
            FrameIndex x;
            try (var source = SeekableByteSource.of(vectors.resolve("videos").resolve(e.getKey()))) {
                x = new FrameIndexer().index(source);
            }
            var s = x.stream();
            String rotation = Double.isNaN(s.rotationDegrees()) ? "0" : Long.toString(Math.round(s.rotationDegrees()));
            String ours = String.join(" ", s.container(), s.codec(), s.pixelFormatName(), s.width() + "x" + s.height(),
                    s.timeBase().toString(), rate(s.avgFrameRate().toString()), Long.toString(s.headerFrameCount()),
                    Integer.toString(x.frameCount()), rotation);
            String pyav = String.join(" ", m.path("container").asText(), m.path("codec").asText(),
                    m.path("pix_fmt").asText(), m.path("width").asInt() + "x" + m.path("height").asInt(),
                    m.path("time_base").asText(), rate(m.path("average_rate").asText()),
                    Long.toString(m.path("header_frames").asLong()), Integer.toString(m.path("decoded_frames").asInt()),
                    Integer.toString(m.path("rotation").asInt()));
            if (!ours.equals(pyav)) differences.add(e.getKey() + ": ours " + ours + ", PyAV " + pyav);
            if (m.path("packets").asInt() != x.entryCount()) differences.add(e.getKey() + ": packets " + x.entryCount());
        }
        assertEquals(10, clips);
        assertEquals(List.of(), differences);
    }

    /** "25/1" and "25" are the same rate. */
    private static String rate(String r) { return r.endsWith("/1") ? r.substring(0, r.length() - 2) : r; }
}
