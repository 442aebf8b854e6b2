package dev.stoker.node;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;

/**
 * Where a node's trainer socket lives and who may use it. The default folder,
 * {@code $XDG_RUNTIME_DIR/stoker}, else {@code /tmp/stoker-<uid>}, is where the Python client looks
 * too. Under /tmp the folder's name is predictable, and whoever owns it (or may write to it) could
 * replace the socket with their own and feed the trainers: a default folder must be this user's,
 * a real folder, and writable by no one else. The socket itself is made {@code rw-------}.
 */
public final class SocketDir {
    private SocketDir() {}

    /** Where the Python client looks by default for job {@code job}: $XDG_RUNTIME_DIR/stoker/JOB.sock, else /tmp/stoker-UID/JOB.sock. */
    public static Path defaultSocket(String job) throws IOException { return defaultDir(System.getenv()).resolve(job + ".sock"); }

    /** This user's runtime folder for Stoker by {@code env}: $XDG_RUNTIME_DIR/stoker, else /tmp/stoker-UID (also the Flight token's, {@link FlightTokenFile}). */
    static Path defaultDir(java.util.Map<String, String> env) throws IOException {
        String xdg = env.get("XDG_RUNTIME_DIR");
        if (xdg != null && !xdg.isEmpty()) return Path.of(xdg, "stoker");
        return Path.of("/tmp", "stoker-" + PrivateFile.uid());
    }

    /**
     * The socket path to serve on: {@code given}, or the default for {@code job}; its folder is made
     * (mode 0700) when missing, and checked ({@link #checkPrivate}): the clients trust no other.
     */
    public static Path prepare(Path given, String job) throws IOException {
        Path sock = given != null ? given : defaultSocket(job);
        Path dir = sock.toAbsolutePath().getParent();
        if (!Files.isDirectory(dir))
            Files.createDirectories(dir, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
        checkPrivate(dir); // a given folder too: the trainers refuse any other (LocalTrust, check_socket), so fail here, at start
        return sock;
    }

    /** Refuses a folder that is a link, another user's, or writable by group or others. */
    public static void checkPrivate(Path dir) {
        PrivateFile.checkFolder(dir, PrivateFile.OTHERS_WRITE, "the socket folder",
                ": its trainers would refuse it; serve from a folder of your own (mode 0700, --socket DIR/NAME.sock or XDG_RUNTIME_DIR)");
    }

    /** Makes {@code socket} this user's trainers' only. */
    static void restrict(Path socket) throws IOException {
        Files.setPosixFilePermissions(socket, PosixFilePermissions.fromString("rw-------"));
    }

}
