package dev.stoker.store;

import static dev.stoker.store.StoreTesting.MIB;
import static dev.stoker.store.StoreTesting.config;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

@Timeout(30)
class StaleArenaTest {
    @TempDir Path dir;

    @Test
    void arenaOfAKilledProcessIsRemovedAndALiveOneIsNot() throws Exception {
        Path java = Path.of(System.getProperty("java.home"), "bin", "java");
        Process child = new ProcessBuilder(java.toString(), "-cp", System.getProperty("java.class.path"),
                ArenaOwnerMain.class.getName(), dir.toString()).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        try {
            var out = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
            String line = out.readLine();
            assertTrue(line != null && line.startsWith("READY "), "child said: " + line);
            Path childArena = Path.of(line.substring("READY ".length()));
            assertTrue(Files.exists(childArena.resolve("seg-0")));

            try (var store = ShmObjectStore.open(config(dir, 4 * MIB))) {
                assertEquals(0, store.metrics().staleArenasRemoved());
                assertTrue(Files.exists(childArena.resolve("seg-0")), "a live process's arena must survive");
            }

            child.destroyForcibly(); // SIGKILL: no shutdown hook, no close(); the kernel drops the lock
            assertTrue(child.waitFor(10, TimeUnit.SECONDS));
            assertTrue(Files.exists(childArena), "a killed process leaves its arena behind");

            try (var store = ShmObjectStore.open(config(dir, 4 * MIB))) {
                assertEquals(1, store.metrics().staleArenasRemoved());
                assertFalse(Files.exists(childArena), "the dead process's arena is removed");
                assertTrue(Files.isDirectory(store.arenaDir()));
            }
        } finally {
            child.destroyForcibly();
        }
    }

    @Test
    void onlyUnlockedArenasOfThisInstanceNameAreRemoved() throws Exception {
        Path dead = Files.createDirectory(dir.resolve("stoker-999999-1a2b"));
        Files.createFile(dead.resolve("arena.lock"));
        Files.write(dead.resolve("seg-0"), new byte[4096]);
        Path deadNested = Files.createDirectories(dead.resolve("sub"));
        Files.createFile(deadNested.resolve("x"));

        Path otherName = Files.createDirectory(dir.resolve("other-999999-1a2b"));
        Files.createFile(otherName.resolve("arena.lock"));
        Path notAnArenaName = Files.createDirectory(dir.resolve("stoker-data"));
        Files.createFile(notAnArenaName.resolve("arena.lock"));
        Path noLock = Files.createDirectory(dir.resolve("stoker-999998-ff"));
        Files.createFile(noLock.resolve("seg-0"));
        Path plainFile = Files.createFile(dir.resolve("stoker-999997-aa"));
        Path target = Files.createDirectory(dir.resolve("target"));
        Files.createFile(target.resolve("arena.lock"));
        Path link = Files.createSymbolicLink(dir.resolve("stoker-999996-bb"), target);

        try (var store = ShmObjectStore.open(config(dir, 4 * MIB))) {
            assertEquals(1, store.metrics().staleArenasRemoved());
            assertFalse(Files.exists(dead));
            for (Path kept : new Path[] {otherName, notAnArenaName, noLock, plainFile, target.resolve("arena.lock"), link}) {
                assertTrue(Files.exists(kept), kept + " must be left alone");
            }
        }
    }

    @Test
    void twoStoresOfOneJvmKeepSeparateArenas() throws Exception {
        try (var first = ShmObjectStore.open(config(dir, 4 * MIB))) {
            StoredObject o = first.allocate(MIB).get().seal();
            try (var second = ShmObjectStore.open(config(dir, 4 * MIB))) {
                assertNotEquals(first.arenaDir(), second.arenaDir());
                assertEquals(0, second.metrics().staleArenasRemoved());
                assertTrue(Files.exists(o.file()), "the first store's arena survives the second's cleanup");
                StoredObject p = second.allocate(MIB).get().seal();
                assertEquals("seg-0", p.file().getFileName().toString());
                p.release();
            }
            assertTrue(Files.exists(o.file()), "and its close");
            o.release();
        }
    }

    /**
     * Audit #30: a folder that looks like a stale arena but another user planted (here: owned by
     * nobody, uid 65534, which a service running as root could delete) is left alone with all it
     * holds; an arena of this user whose entries are links to a victim's file and folder outside has
     * the links removed, never what they point to; this user's plain stale arena is cleaned.
     */
    @Test
    void foreignArenasAreLeftAloneAndLinksAreNeverFollowed() throws Exception {
        Path victims = Files.createDirectory(dir.resolve("victims"));
        Path victimFile = Files.writeString(victims.resolve("id_ed25519"), "secret");
        Path victimDir = Files.createDirectory(victims.resolve("home"));
        Path victimInner = Files.writeString(victimDir.resolve("thesis.tex"), "years of work");
        Path shm = Files.createDirectory(dir.resolve("shm"));
        Files.setPosixFilePermissions(shm, PosixFilePermissions.fromString("rwxrwxrwx")); // as /dev/shm (less the sticky bit)

        Path mine = Files.createDirectory(shm.resolve("stoker-999999-1a2b"));
        Files.createFile(mine.resolve("arena.lock"));
        Files.write(mine.resolve("seg-0"), new byte[4096]);

        Path links = Files.createDirectory(shm.resolve("stoker-999998-3c4d"));
        Files.createFile(links.resolve("arena.lock"));
        Files.createSymbolicLink(links.resolve("seg-0"), victimFile);
        Files.createSymbolicLink(links.resolve("seg-1"), victimDir);
        Path nested = Files.createDirectory(links.resolve("sub"));
        Files.createSymbolicLink(nested.resolve("x"), victimDir);

        boolean root = "0".equals(String.valueOf(Files.getAttribute(Path.of("/proc/self"), "unix:uid")));
        Path foreign = null;
        if (root) {
            foreign = Files.createDirectory(shm.resolve("stoker-999997-5e6f"));
            Files.createFile(foreign.resolve("arena.lock"));
            Files.write(foreign.resolve("seg-0"), new byte[4096]);
            for (Path p : new Path[] {foreign.resolve("arena.lock"), foreign.resolve("seg-0"), foreign})
                Files.setAttribute(p, "unix:uid", 65534, LinkOption.NOFOLLOW_LINKS);
        }

        try (var store = ShmObjectStore.open(config(shm, 4 * MIB))) {
            assertFalse(Files.exists(mine, LinkOption.NOFOLLOW_LINKS), "this user's stale arena is removed");
            assertFalse(Files.exists(links, LinkOption.NOFOLLOW_LINKS), "the arena holding links is removed too");
            assertEquals("secret", Files.readString(victimFile), "a link's target survives");
            assertEquals("years of work", Files.readString(victimInner), "a linked folder's contents survive");
            assertEquals(2, store.metrics().staleArenasRemoved());
            if (foreign != null) {
                assertTrue(Files.exists(foreign.resolve("seg-0")), "another user's folder is left alone");
                assertTrue(Files.exists(foreign.resolve("arena.lock")));
            }
            StoredObject o = store.allocate(MIB).get().seal(); // the store works as ever
            assertTrue(Files.exists(o.file()));
            o.release();
        }
        assumeTrue(root, "chown to another user needs root: the foreign-folder half was not run");
    }
}
