package dev.stoker.store;

import static dev.stoker.store.StoreTesting.MIB;
import static dev.stoker.store.StoreTesting.await;
import static dev.stoker.store.StoreTesting.config;
import static dev.stoker.store.StoreTesting.failure;
import static dev.stoker.store.StoreTesting.segmentFileCount;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** A store on a tmpfs smaller than its budget: creation fails cleanly instead of a later SIGBUS. */
@Timeout(30)
class FullFileSystemTest {
    @TempDir Path tmp;

    @Test
    void aFullFileSystemFailsTheAllocationAndLeavesNoFileBehind() throws Exception {
        Path mount = Files.createDirectory(tmp.resolve("small-tmpfs"));
        assumeTrue(run("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mount.toString()) == 0,
                "needs root and permission to mount a 4 MiB tmpfs");
        try {
            try (var store = ShmObjectStore.open(config(mount, 64 * MIB))) {
                Throwable e = failure(store.allocate(8 * MIB));
                assertInstanceOf(StoreException.class, e);
                assertTrue(e.getMessage().contains("No space left"), e.getMessage());
                assertTrue(e.getMessage().startsWith("cannot create a 8388608-byte segment in " + mount + ": "), e.getMessage());
                assertEquals(0, segmentFileCount(store.arenaDir()), "the partial segment file is deleted");
                assertEquals(0, store.metrics().mappedBytes());

                StoredObject o = await(store.allocate(MIB)).seal();
                assertEquals(MIB, Files.size(o.file()));
                assertEquals(MIB, store.metrics().mappedBytes());
                o.release();
            }
        } finally {
            run("umount", mount.toString());
        }
    }

    private static int run(String... command) throws IOException, InterruptedException {
        Process p;
        try {
            p = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        } catch (IOException e) {
            return -1; // no such command
        }
        if (!p.waitFor(10, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            return -1;
        }
        return p.exitValue();
    }
}
