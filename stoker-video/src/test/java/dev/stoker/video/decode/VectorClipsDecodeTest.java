package dev.stoker.video.decode;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.video.ffmpeg.NativeTools;
import dev.stoker.video.index.FrameIndex;
import dev.stoker.video.index.FrameIndexer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Every frame of each clip of the Qwen-VL video vectors ({@code ../shared/vectors/qwen-vl-video}), decoded to rgb24,
 * against the sha256 of PyAV 18.1's {@code to_ndarray("rgb24")} frames in their MANIFEST.json ({@code decoded_sha256}):
 * the decoder the vectors' pixel values were made with. Skipped, saying so, where the shared folder is absent.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class VectorClipsDecodeTest {
    @Test
    void everyClipDecodesToPyAvsFrames() throws Exception {
        Path vectors = NativeTools.videoVectorsOrSkip();
        NativeTools.requireLibraries();
        JsonNode videos = new ObjectMapper().readTree(vectors.resolve("MANIFEST.json").toFile()).path("videos");
        List<String> differences = new ArrayList<>();
        int clips = 0;
        for (Map.Entry<String, JsonNode> e : videos.properties()) {
            if (!e.getValue().has("decoded_sha256")) continue; // the image of the mixed cases
            clips++;
            try (var source = SeekableByteSource.of(vectors.resolve("videos").resolve(e.getKey()))) {
                FrameIndex index = new FrameIndexer().index(source);
                int[] all = java.util.stream.IntStream.range(0, index.frameCount()).toArray();
                MessageDigest sha = MessageDigest.getInstance("SHA-256");
                VideoDecoder.decode(source, index, all, System.nanoTime() + 60_000_000_000L,
                        (f, w, h, rgb) -> sha.update(rgb, 0, w * h * 3));
                String ours = HexFormat.of().formatHex(sha.digest());
                if (!ours.equals(e.getValue().path("decoded_sha256").asText())) differences.add(e.getKey());
            }
        }
        assertEquals(10, clips);
        assertEquals(List.of(), differences, "clips whose frames differ from PyAV 18.1's");
    }
}
