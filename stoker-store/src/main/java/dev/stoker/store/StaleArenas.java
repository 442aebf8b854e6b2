package dev.stoker.store;

import static java.nio.file.LinkOption.NOFOLLOW_LINKS;
import static java.nio.file.StandardOpenOption.WRITE;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.SecureDirectoryStream;
import java.nio.file.attribute.BasicFileAttributeView;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.PosixFileAttributeView;
import java.nio.file.attribute.UserPrincipal;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * Removes the arenas that dead stores left in a shared store directory such as {@code /dev/shm}
 * (audit #30), without ever letting another local user point the removal elsewhere.
 *
 * <p>{@code /dev/shm} is writable by everyone, so a folder there that looks like a stale arena may
 * have been planted by another user: a folder of theirs (which a service run as root could delete),
 * or a folder whose entries are links to the victim's files, or one they swap for a link while it is
 * being removed (the classic {@code rm -rf} race). So every step works on open directory handles,
 * never on path names: the store directory and each candidate are opened as
 * {@link SecureDirectoryStream}s (Linux: {@code openat} with {@code O_NOFOLLOW}, {@code unlinkat}); a
 * candidate must be a real folder (not a link) owned by this process's user, checked again on the
 * opened handle; its lock file is opened through that handle without following a link; its entries
 * are deleted through the handle, sub-folders opened the same way and links removed as links. A
 * folder swapped for a link after it was opened is no longer reachable by name, and what is deleted
 * is what was opened. Where the platform has no secure directory streams nothing is removed.
 */
final class StaleArenas {
    private static final System.Logger LOG = System.getLogger(StaleArenas.class.getName());
    /** Deepest folder nesting removed inside an arena (a store makes none; anything deeper is left alone). */
    private static final int MAX_DEPTH = 8;
    /** Most entries read from one folder of an arena (a store makes budget / 1 MiB segments at most). */
    private static final int MAX_ENTRIES = 1 << 20;

    private StaleArenas() {}

    /**
     * Deletes the arenas named {@code <instanceName>-<pid>-<hex>} directly under {@code directory} that
     * are real folders of this user whose {@code arena.lock} can be locked (their store is dead);
     * returns how many. Anything else is left alone.
     */
    static long remove(Path directory, String instanceName) {
        Pattern arenaName = Pattern.compile(Pattern.quote(instanceName) + "-\\d+-[0-9a-f]+");
        UserPrincipal me;
        try {
            me = Files.getOwner(Path.of("/proc/self")); // this process's (effective) user
        } catch (IOException | UnsupportedOperationException e) {
            LOG.log(System.Logger.Level.WARNING, "cannot tell this process's user; stale store arenas are left alone", e);
            return 0;
        }
        long removed = 0;
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(directory)) {
            if (!(entries instanceof SecureDirectoryStream<Path> parent)) {
                LOG.log(System.Logger.Level.WARNING, "no secure directory streams on this platform; stale store arenas in "
                        + directory + " are left alone");
                return 0;
            }
            List<Path> names = new ArrayList<>();
            for (Path p : parent) {
                if (arenaName.matcher(p.getFileName().toString()).matches()) names.add(p.getFileName());
                if (names.size() >= MAX_ENTRIES) break;
            }
            for (Path name : names) {
                if (removeIfStale(parent, name, directory.resolve(name), me)) {
                    removed++;
                    LOG.log(System.Logger.Level.INFO, "removed the stale store arena " + directory.resolve(name) + " (its owner is gone)");
                }
            }
        } catch (IOException e) {
            LOG.log(System.Logger.Level.WARNING, "cannot scan " + directory + " for stale store arenas", e);
        }
        return removed;
    }

    private static boolean removeIfStale(SecureDirectoryStream<Path> parent, Path name, Path shown, UserPrincipal me) {
        try {
            var attrs = parent.getFileAttributeView(name, PosixFileAttributeView.class, NOFOLLOW_LINKS).readAttributes();
            if (!attrs.isDirectory()) return false; // a link, a file: not an arena
            if (!attrs.owner().equals(me)) {
                LOG.log(System.Logger.Level.INFO, "left alone " + shown + ": it looks like a store arena but belongs to "
                        + attrs.owner().getName() + ", not to " + me.getName());
                return false;
            }
            try (SecureDirectoryStream<Path> arena = parent.newDirectoryStream(name, NOFOLLOW_LINKS)) {
                // the folder actually opened, which may differ from the one just read if it was swapped meanwhile
                var opened = arena.getFileAttributeView(PosixFileAttributeView.class).readAttributes();
                if (!opened.owner().equals(me) || !opened.isDirectory()) return false;
                Path lockName = Path.of(ShmObjectStore.LOCK_FILE);
                BasicFileAttributes lockAttrs;
                try {
                    lockAttrs = arena.getFileAttributeView(lockName, BasicFileAttributeView.class, NOFOLLOW_LINKS).readAttributes();
                } catch (NoSuchFileException e) {
                    return false; // not an arena (or one being made)
                }
                if (!lockAttrs.isRegularFile()) return false; // a FIFO would block the open, a link is not ours to follow
                try (var channel = (FileChannel) arena.newByteChannel(lockName, Set.of(WRITE, NOFOLLOW_LINKS))) {
                    FileLock held;
                    try {
                        held = channel.tryLock();
                    } catch (OverlappingFileLockException e) {
                        return false; // a live store of this JVM
                    }
                    if (held == null) return false; // a live store of another process
                    deleteContents(arena, shown, 0);
                }
            }
            parent.deleteDirectory(name); // unlinkat: removes a link in its place, never what it points to
            return true;
        } catch (NoSuchFileException e) {
            return false; // gone meanwhile (another store's cleanup)
        } catch (IOException | RuntimeException e) {
            LOG.log(System.Logger.Level.DEBUG, "cannot remove " + shown + ", left alone", e);
            return false;
        }
    }

    /** Deletes every entry of the open folder {@code dir}, through its handle, never following a link. */
    private static void deleteContents(SecureDirectoryStream<Path> dir, Path shown, int depth) throws IOException {
        if (depth > MAX_DEPTH) throw new IOException(shown + " is nested deeper than " + MAX_DEPTH + " folders; left alone");
        List<Path> names = new ArrayList<>();
        for (Path p : dir) {
            names.add(p.getFileName());
            if (names.size() > MAX_ENTRIES) throw new IOException(shown + " holds more than " + MAX_ENTRIES + " entries; left alone");
        }
        for (Path name : names) {
            BasicFileAttributes a;
            try {
                a = dir.getFileAttributeView(name, BasicFileAttributeView.class, NOFOLLOW_LINKS).readAttributes();
                if (a.isDirectory()) {
                    try (SecureDirectoryStream<Path> sub = dir.newDirectoryStream(name, NOFOLLOW_LINKS)) {
                        deleteContents(sub, shown.resolve(name), depth + 1);
                    }
                    dir.deleteDirectory(name);
                } else {
                    dir.deleteFile(name); // a link is removed as a link
                }
            } catch (NoSuchFileException e) {
                // gone meanwhile
            }
        }
    }
}
