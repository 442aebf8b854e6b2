package dev.stoker.source;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** An object read at any position through ranged block fetches: the bytes, what is fetched, members, errors. */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class RangedObjectBytesTest {
    @TempDir Path tmp;
    private static final long TIMEOUT = TimeUnit.SECONDS.toNanos(10);

    private static byte[] read(RangedObjectBytes bytes, long position, int length) throws IOException {
        byte[] out = new byte[length];
        int done = 0;
        while (done < length) {
            int n = bytes.read(position + done, MemorySegment.ofArray(out).asSlice(done));
            if (n < 0) return Arrays.copyOf(out, done);
            done += n;
        }
        return out;
    }

    @Test
    void readsAnywhereFetchOnlyTheBlocksTouched() throws Exception {
        Path root = Files.createDirectories(tmp.resolve("root"));
        byte[] data = new byte[20 * RangedObjectBytes.BLOCK_BYTES + 12_345];
        new Random(3).nextBytes(data);
        Files.write(root.resolve("big.mp4"), data);
        try (var source = ObjectSources.open(root.resolve("x.jsonl").toString(), SourceConfig.defaults())) {
            var bytes = RangedObjectBytes.of(source, "big.mp4", TIMEOUT);
            assertEquals(data.length, bytes.sizeBytes());
            // the end (where an MP4's moov may be), then a seek into the middle
            long end = data.length - 5000;
            assertArrayEquals(Arrays.copyOfRange(data, (int) end, data.length), read(bytes, end, 5000));
            int mid = 7 * RangedObjectBytes.BLOCK_BYTES - 100;
            assertArrayEquals(Arrays.copyOfRange(data, mid, mid + 300), read(bytes, mid, 300));
            assertEquals(3, bytes.fetches(), "the last block and the two around the middle read");
            assertTrue(bytes.bytesFetched() < data.length / 6, "fetched " + bytes.bytesFetched() + " of " + data.length);
            read(bytes, mid, 300);
            assertEquals(3, bytes.fetches(), "cached blocks are not fetched again");
            assertEquals(-1, bytes.read(data.length, MemorySegment.ofArray(new byte[10])));
        }
    }

    @Test
    void aMemberIsItsRangeOfTheShard() throws Exception {
        Path root = Files.createDirectories(tmp.resolve("root"));
        byte[] shard = new byte[3 * RangedObjectBytes.BLOCK_BYTES];
        new Random(5).nextBytes(shard);
        Files.write(root.resolve("shard-000.tar"), shard);
        try (var source = ObjectSources.open(root.resolve("shard-000.tar").toString(), SourceConfig.defaults())) {
            int offset = RangedObjectBytes.BLOCK_BYTES + 512, length = 1_500_000;
            var member = RangedObjectBytes.range(source, "shard-000.tar", offset, length, "shard-000.tar:clip.mp4", TIMEOUT);
            assertEquals(length, member.sizeBytes());
            assertArrayEquals(Arrays.copyOfRange(shard, offset, offset + length), read(member, 0, length + 100));
            var missing = RangedObjectBytes.range(source, "none.tar", 0, 10, "none.tar:clip.mp4", TIMEOUT);
            var e = assertThrows(IOException.class, () -> read(missing, 0, 10));
            assertTrue(e.getMessage().startsWith("none.tar:clip.mp4: "), e.getMessage());
        }
    }
}
