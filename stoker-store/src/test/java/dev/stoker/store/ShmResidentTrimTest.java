package dev.stoker.store;

import static dev.stoker.store.StoreTesting.MIB;
import static dev.stoker.store.StoreTesting.await;
import static dev.stoker.store.StoreTesting.config;
import static dev.stoker.store.StoreTesting.fill;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The pages a store keeps in memory (issue 30's memory item). Under a resident limit ({@code --shm-resident},
 * {@link ShmObjectStore#limitResident}) a reused segment keeps only the pages its object's size class needs (a 64 MiB
 * segment reused for a 10 MiB object gives the rest back, and reused again for 40 MiB gets those pages back, filled and
 * faulted in, with the object's bytes intact), a released segment gives back its last pages while the store is over the
 * limit, objects in flight keep theirs whatever the limit, and prepared segments stay within it; without a limit a reused
 * segment keeps all of its pages. Read from this process's own /proc/self/smaps (the segment's mapping's Rss), in a folder
 * on /dev/shm (tmpfs, where the store runs).
 */
@Timeout(60)
class ShmResidentTrimTest {
    private Path dir;

    @BeforeEach
    void folder() throws IOException {
        assumeTrue(Files.isDirectory(Path.of("/dev/shm")) && Files.isReadable(Path.of("/proc/self/smaps")), "needs /dev/shm and /proc");
        dir = Files.createTempDirectory(Path.of("/dev/shm"), "stoker-trim-test");
    }

    @AfterEach
    void removeFolder() throws IOException {
        if (dir == null) return;
        try (var walk = Files.walk(dir)) {
            for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
        }
    }

    @Test
    void aSmallerObjectGivesTheSegmentsTailBackAndALargerOneGetsItAgain() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 256 * MIB))) {
            store.limitResident(1L << 40); // trimming on reuse trades pages for memory: only under a limit, never reached here
            StoredObject bigObject = await(store.allocate(64 * MIB)).seal();
            Path file = bigObject.file();
            assertEquals(1, store.metrics().segmentsCreated());
            assertTrue(residentBytes(file) >= 64 * MIB, "a new segment is resident whole: " + residentBytes(file));
            bigObject.release();

            Allocation small = await(store.allocate(10 * MIB));
            assertEquals(1, store.metrics().segmentsReused(), "the free 64 MiB segment serves the 10 MiB object");
            long trimmed = residentBytes(file);
            assertTrue(trimmed <= 10 * MIB, "pages past the 10 MiB size class went back: " + trimmed);
            fill(small.segment(), 3);
            byte[] smallBytes = small.segment().toArray(ValueLayout.JAVA_BYTE);
            StoredObject smallObject = small.seal();
            assertArrayEquals(smallBytes, smallObject.segment().toArray(ValueLayout.JAVA_BYTE));
            smallObject.release();

            Allocation larger = await(store.allocate(40 * MIB));
            assertEquals(2, store.metrics().segmentsReused());
            assertEquals(1, store.metrics().segmentsCreated(), "no new segment: the hole was filled again");
            assertTrue(residentBytes(file) >= 40 * MIB, "the 40 MiB object's pages are resident again: " + residentBytes(file));
            fill(larger.segment(), 9);
            byte[] largerBytes = larger.segment().toArray(ValueLayout.JAVA_BYTE);
            StoredObject o = larger.seal();
            assertArrayEquals(largerBytes, o.segment().toArray(ValueLayout.JAVA_BYTE));
            o.release();
        }
    }

    /** Without a resident limit (the default) a segment reused for a much smaller object keeps all of its pages. */
    @Test
    void withoutAResidentLimitAReusedSegmentKeepsItsPages() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 256 * MIB))) {
            StoredObject bigObject = await(store.allocate(64 * MIB)).seal();
            Path file = bigObject.file();
            bigObject.release();
            Allocation small = await(store.allocate(10 * MIB));
            assertEquals(1, store.metrics().segmentsReused());
            assertTrue(residentBytes(file) >= 64 * MIB, "no page went back: " + residentBytes(file));
            small.abort();
        }
    }

    @Test
    void releasedSegmentsGiveTheirPagesBackDownToTheLimitAndServeTheNextObjectIntact() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 256 * MIB))) {
            store.limitResident(40 * MIB);
            // three objects in flight, 48 MiB in all: over the limit, and all of their pages stay while they are held
            var a = await(store.allocate(16 * MIB));
            var b = await(store.allocate(16 * MIB));
            var c = await(store.allocate(16 * MIB));
            fill(a.segment(), 1);
            fill(b.segment(), 2);
            fill(c.segment(), 3);
            byte[] bBytes = b.segment().toArray(ValueLayout.JAVA_BYTE), cBytes = c.segment().toArray(ValueLayout.JAVA_BYTE);
            StoredObject ao = a.seal(), bo = b.seal(), co = c.seal();
            Path aFile = ao.file(), bFile = bo.file(), cFile = co.file();
            assertEquals(48 * MIB, store.metrics().residentBytes(), "objects in flight keep every page: " + store.metrics());
            assertTrue(residentBytes(aFile) >= 16 * MIB && residentBytes(bFile) >= 16 * MIB && residentBytes(cFile) >= 16 * MIB);

            ao.release(); // 8 MiB over: a's last 8 MiB go back, its first 8 stay for the next object
            StoreMetrics m = store.metrics();
            assertEquals(40 * MIB, m.residentBytes(), m.toString());
            assertEquals(8 * MIB, m.returnedBytes(), m.toString());
            assertEquals(40 * MIB, m.residentLimitBytes());
            assertTrue(residentBytes(aFile) <= 8 * MIB, "a's segment holds at most 8 MiB now: " + residentBytes(aFile));
            assertArrayEquals(bBytes, bo.segment().toArray(ValueLayout.JAVA_BYTE), "b in flight is untouched");

            bo.release(); // within the limit again: b's segment keeps all of its pages
            m = store.metrics();
            assertEquals(40 * MIB, m.residentBytes(), m.toString());
            assertEquals(8 * MIB, m.returnedBytes(), "nothing more given back: " + m);
            assertTrue(residentBytes(bFile) >= 16 * MIB, "b's free segment kept its pages: " + residentBytes(bFile));

            // the next two 16 MiB objects reuse the two free segments: a's gets its 8 MiB filled again; both intact
            var d = await(store.allocate(16 * MIB));
            var e = await(store.allocate(16 * MIB));
            assertEquals(2, store.metrics().segmentsReused());
            assertEquals(3, store.metrics().segmentsCreated(), "no new segment");
            assertEquals(48 * MIB, store.metrics().residentBytes(), "their pages are all in memory again: " + store.metrics());
            fill(d.segment(), 4);
            fill(e.segment(), 5);
            byte[] dBytes = d.segment().toArray(ValueLayout.JAVA_BYTE), eBytes = e.segment().toArray(ValueLayout.JAVA_BYTE);
            StoredObject dO = d.seal(), eO = e.seal();
            assertTrue(residentBytes(aFile) >= 16 * MIB, "a's segment is whole again: " + residentBytes(aFile));
            assertArrayEquals(dBytes, dO.segment().toArray(ValueLayout.JAVA_BYTE));
            assertArrayEquals(eBytes, eO.segment().toArray(ValueLayout.JAVA_BYTE));
            assertArrayEquals(cBytes, co.segment().toArray(ValueLayout.JAVA_BYTE), "c in flight throughout is untouched");
            dO.release();
            eO.release();
            co.release();
            m = store.metrics();
            assertTrue(m.residentBytes() <= 40 * MIB, "back within the limit once nothing is held: " + m);
            assertEquals(16 * MIB, m.returnedBytes(), "8 MiB the first time, 8 more now: " + m);
        }
    }


    @Test
    void preparedSegmentsStayWithinTheLimitAndItMustBePositive() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 256 * MIB))) {
            store.limitResident(40 * MIB);
            assertEquals(2, store.prewarm(16 * MIB, 4), "two 16 MiB segments fit 40 MiB, not four");
            assertEquals(32 * MIB, store.metrics().residentBytes());
            assertEquals(0, store.metrics().returnedBytes());
            assertThrows(IllegalArgumentException.class, () -> store.limitResident(0));
        }
        try (var store = ShmObjectStore.open(config(dir, 256 * MIB))) {
            assertEquals(0, store.metrics().residentLimitBytes(), "no limit by default");
            assertEquals(4, store.prewarm(16 * MIB, 4));
        }
    }

    /** Rss of this process's mappings of {@code file}, from /proc/self/smaps. */
    static long residentBytes(Path file) throws IOException {
        long kb = 0;
        boolean in = false;
        for (String line : Files.readAllLines(Path.of("/proc/self/smaps"))) {
            if (!line.isEmpty() && Character.isLetterOrDigit(line.charAt(0)) && line.contains("-") && line.indexOf(' ') > 0
                    && line.substring(0, line.indexOf(' ')).matches("[0-9a-f]+-[0-9a-f]+")) {
                in = line.endsWith(file.toString()) || line.endsWith(file.toString() + " (deleted)");
            } else if (in && line.startsWith("Rss:")) {
                kb += Long.parseLong(line.replaceAll("[^0-9]", ""));
            }
        }
        return kb * 1024;
    }
}
