package dev.stoker.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

@Timeout(60)
class StoreConfigTest {
    @TempDir Path dir;

    @Test
    void defaults() {
        assertEquals(Path.of("/dev/shm"), StoreConfig.DEFAULT_DIRECTORY);
        assertEquals(4L << 30, StoreConfig.DEFAULT_BUDGET_BYTES);
        StoreConfig c = StoreConfig.defaults(1 << 20);
        assertEquals(StoreConfig.DEFAULT_DIRECTORY, c.directory());
        assertEquals("stoker", c.instanceName());
        assertEquals(1 << 20, c.budgetBytes());
    }

    @Test
    void invalidValuesAreRefusedWithTheReason() throws Exception {
        assertEquals("store budget must be positive, got 0 bytes (--shm-budget)",
                assertThrows(IllegalArgumentException.class, () -> new StoreConfig(dir, 0, "stoker")).getMessage());
        Path missing = dir.resolve("missing");
        assertEquals("store directory " + missing + " does not exist",
                assertThrows(IllegalArgumentException.class, () -> new StoreConfig(missing, 1, "stoker")).getMessage());
        Path file = Files.createFile(dir.resolve("file"));
        assertEquals("store directory " + file + " is not a directory",
                assertThrows(IllegalArgumentException.class, () -> new StoreConfig(file, 1, "stoker")).getMessage());
        for (String bad : new String[] {"", "a/b", "..", ".hidden", "a-b", "a b"}) {
            assertThrows(IllegalArgumentException.class, () -> new StoreConfig(dir, 1, bad), bad);
        }
        assertThrows(IllegalArgumentException.class, () -> new StoreConfig(null, 1, "stoker"));
        assertThrows(IllegalArgumentException.class, () -> new StoreConfig(dir, 1, null));
    }
}
