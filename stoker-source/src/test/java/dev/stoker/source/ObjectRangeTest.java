package dev.stoker.source;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The object calls of a local source beyond whole fetches: ranged reads, stat, streams and listings, confined to the root. */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class ObjectRangeTest {
    @TempDir Path tmp;

    static SampleException refusal(ObjectSource source, String ref, long offset, int length) {
        var e = assertThrows(ExecutionException.class, () -> source.fetchRange(ref, offset, length).get(10, TimeUnit.SECONDS));
        var se = assertInstanceOf(SampleException.class, e.getCause());
        assertEquals(SampleException.Stage.MANIFEST, se.stage()); // a ranged read reads records (a shard's, a Parquet file's)
        assertEquals(ref, se.sampleId());
        return se;
    }

    @Test
    void rangesStatsStreamsAndListingsOfTheRoot() throws Exception {
        Path root = Files.createDirectories(tmp.resolve("root"));
        byte[] bytes = new byte[10_000];
        for (int i = 0; i < bytes.length; i++) bytes[i] = (byte) (i * 31);
        Files.write(root.resolve("b.bin"), bytes);
        Files.write(Files.createDirectories(root.resolve("sub")).resolve("c.bin"), bytes);
        Files.write(root.resolve("a.bin"), new byte[3]);
        Files.write(tmp.resolve("outside.bin"), bytes);
        Files.createSymbolicLink(root.resolve("link.bin"), tmp.resolve("outside.bin"));
        try (var source = ObjectSources.open(root.resolve("x.tar").toString(), SourceConfig.defaults())) {
            assertArrayEquals(Arrays.copyOfRange(bytes, 1234, 5678), source.fetchRange("b.bin", 1234, 5678 - 1234).get(10, TimeUnit.SECONDS));
            assertArrayEquals(Arrays.copyOfRange(bytes, 7, 9), source.fetchRange("sub/c.bin", 7, 2).get(10, TimeUnit.SECONDS));
            assertEquals(0, source.fetchRange("b.bin", 10, 0).get(10, TimeUnit.SECONDS).length);
            assertTrue(refusal(source, "b.bin", 9_000, 2_000).getMessage().contains("ends at byte 10000"));
            assertTrue(refusal(source, "../outside.bin", 0, 1).getMessage().contains("escapes the data set root"));
            assertTrue(refusal(source, "link.bin", 0, 1).getMessage().contains("through a symlink"));
            assertTrue(refusal(source, "none.bin", 0, 1).getMessage().contains("file not found"));
            assertEquals(10_000, source.stat("b.bin").size());
            assertTrue(assertThrows(IOException.class, () -> source.stat("none.bin")).getMessage().contains("not found"));
            assertThrows(IOException.class, () -> source.stat("link.bin"));
            assertThrows(IOException.class, () -> source.open("../outside.bin"));
            try (var in = source.open("sub/c.bin")) {
                assertArrayEquals(bytes, in.readAllBytes());
            }
            assertEquals(List.of("a.bin", "b.bin"), source.list(""), "regular files directly in the root, a symlink out of it left out");
            assertEquals(List.of("b.bin"), source.list("b"));
            assertEquals(List.of("sub/c.bin"), source.list("sub/"));
            assertThrows(IOException.class, () -> source.list("../"));
            assertThrows(IOException.class, () -> source.list("nosuch/"));
        }
    }
}
