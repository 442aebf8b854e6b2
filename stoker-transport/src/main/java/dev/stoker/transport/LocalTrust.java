package dev.stoker.transport;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFileAttributes;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Set;

/**
 * What a trainer checks before it trusts a local service (audit #19): the socket it connects to and
 * the shared-memory files it maps must be its own user's, and out of reach of anyone else.
 *
 * <p>Why: the default socket, {@code /tmp/stoker-<uid>/<job>.sock} when {@code XDG_RUNTIME_DIR} is
 * unset (SLURM, cron, containers), has a predictable name in a folder everyone may write. Another
 * local user who makes that folder first, or who may write into the socket's folder, can put their
 * own service there and feed the trainer batches of their choosing; a service that names a file
 * another user owns or may write, or a link, hands the trainer memory someone else controls.
 * {@code serve} refuses such a folder at start ({@code SocketDir.checkPrivate}); the client holds
 * every socket, given or default, to the same rule, since it cannot tell which service made it.
 *
 * <p>The rule: the socket's folder is a real folder (not a link) owned by this process's user and
 * writable by no group or other; the socket is a socket owned by that user. A segment file is a
 * regular file (not a link, checked without following one and opened with {@code O_NOFOLLOW}), owned
 * by the socket's owner (the same user: Stoker does not support a service of another user) and
 * writable by no group or other. Anything else is refused with an {@link IOException} naming the path
 * and the cause.
 */
final class LocalTrust {
    private LocalTrust() {}

    private static final LinkOption NOFOLLOW = LinkOption.NOFOLLOW_LINKS;

    private static volatile int uid = -1;

    /** This process's user id (the owner of {@code /proc/self}), read once. */
    static int uid() throws IOException {
        int u = uid;
        if (u < 0) uid = u = (Integer) Files.getAttribute(Path.of("/proc/self"), "unix:uid");
        return u;
    }

    /** Refuses {@code socket} unless it and its folder are this user's alone (see the class comment). */
    static void checkSocket(Path socket) throws IOException {
        Path abs = socket.toAbsolutePath();
        Path dir = abs.getParent();
        int me = uid();
        if (dir == null) throw new IOException("refusing the Stoker socket " + abs + ": it has no folder");
        if (Files.isSymbolicLink(dir))
            throw refused("socket folder", dir, "it is a symbolic link (to " + Files.readSymbolicLink(dir) + ")");
        if (!Files.isDirectory(dir, NOFOLLOW)) throw new NoSuchFileException(dir.toString(), null, "no such socket folder");
        int owner = (Integer) Files.getAttribute(dir, "unix:uid", NOFOLLOW);
        var mode = Files.getPosixFilePermissions(dir, NOFOLLOW);
        if (owner != me) throw refused("socket folder", dir, "it belongs to uid " + owner + ", not to this user (uid " + me + ")");
        if (mode.contains(PosixFilePermission.GROUP_WRITE) || mode.contains(PosixFilePermission.OTHERS_WRITE))
            throw refused("socket folder", dir, "it is writable by " + whoMayWrite(mode) + " (mode " + PosixFilePermissions.toString(mode)
                    + "), who could put their own service in its place");
        if (!Files.exists(abs, NOFOLLOW)) return; // not there yet: connecting says so (and the caller may retry)
        var attrs = Files.readAttributes(abs, PosixFileAttributes.class, NOFOLLOW);
        if (attrs.isSymbolicLink()) throw refused("socket", abs, "it is a symbolic link");
        int sockOwner = (Integer) Files.getAttribute(abs, "unix:uid", NOFOLLOW);
        if (sockOwner != me) throw refused("socket", abs, "it belongs to uid " + sockOwner + ", not to this user (uid " + me + ")");
    }

    /**
     * The attributes of segment file {@code file}, read without following a link, after checking it
     * is a regular file of this user that no group or other may write.
     */
    static PosixFileAttributes checkSegment(Path file) throws IOException {
        PosixFileAttributes attrs;
        try {
            attrs = Files.readAttributes(file, PosixFileAttributes.class, NOFOLLOW);
        } catch (NoSuchFileException e) {
            throw new IOException("cannot map the shared-memory segment " + file + " the service named: no such file", e);
        }
        if (attrs.isSymbolicLink()) throw refused("shared-memory segment", file, "it is a symbolic link (to "
                + Files.readSymbolicLink(file) + "), not the service's own file");
        if (!attrs.isRegularFile()) throw refused("shared-memory segment", file, "it is not a regular file");
        int owner = (Integer) Files.getAttribute(file, "unix:uid", NOFOLLOW);
        int me = uid();
        if (owner != me) throw refused("shared-memory segment", file, "it belongs to uid " + owner + ", not to this user (uid " + me
                + ") who runs the service");
        var mode = attrs.permissions();
        if (mode.contains(PosixFilePermission.GROUP_WRITE) || mode.contains(PosixFilePermission.OTHERS_WRITE))
            throw refused("shared-memory segment", file, "it is writable by " + whoMayWrite(mode) + " (mode "
                    + PosixFilePermissions.toString(mode) + ")");
        return attrs;
    }

    private static String whoMayWrite(Set<PosixFilePermission> mode) {
        boolean g = mode.contains(PosixFilePermission.GROUP_WRITE), o = mode.contains(PosixFilePermission.OTHERS_WRITE);
        return g && o ? "its group and others" : g ? "its group" : "others";
    }

    private static IOException refused(String what, Path path, String cause) {
        return new IOException("refusing the Stoker " + what + " " + path + ": " + cause
                + (what.startsWith("socket") ? "; serve the job from a folder of your own, mode 0700 (serve --socket, or set XDG_RUNTIME_DIR)" : ""));
    }
}
