package dev.stoker.node;

import dev.stoker.flight.FlightBatchServer;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Map;

/**
 * The per-user Flight token, so that every Flight endpoint needs a token, loopback included (audit
 * #9: any local user could take a rank's batches from a loopback endpoint without one). Where no token
 * is given ({@code --flight-token-file}, {@code $STOKER_FLIGHT_TOKEN}), the service uses the file
 * {@value #NAME} in this user's Stoker runtime folder ({@code $XDG_RUNTIME_DIR/stoker}, else
 * {@code /tmp/stoker-<uid>}: the socket's folder), making it on first use: 32 random bytes from
 * {@link java.security.SecureRandom} as hex, mode 0600. Clients of the same user on the same host find it there
 * ({@link #forClient}); other users cannot read it.
 *
 * <p>Trust: the folder must be a real folder (not a link) owned by this user with no permission for
 * group or others (0700), because whoever can write to it could swap the file; the file must be a
 * regular file (not a link) owned by this user that group and others can neither read nor write.
 * Anything else is refused with a message saying what to fix; nothing is repaired silently. The file
 * is made atomically (written under a temporary name, then hard-linked to its name), so services
 * starting at once agree on one token and no reader sees a half-written one.
 */
public final class FlightTokenFile {
    /** The default file's name in the runtime folder. */
    public static final String NAME = "flight.token";
    /** Longest token file read (a token is at most a few hundred characters). */
    static final int MAX_FILE_BYTES = 4096;

    private FlightTokenFile() {}

    /** A token and where it came from ({@code file} null: the environment); {@code made}: the file was made just now. */
    public record Token(String value, Path file, boolean made) {
        /** Never shows the token. */
        @Override
        public String toString() { return "Token[" + (file == null ? "environment" : file) + (made ? ", made" : "") + "]"; }
    }

    /** The default token file by {@code env} ($XDG_RUNTIME_DIR): {@code $XDG_RUNTIME_DIR/stoker/flight.token}, else {@code /tmp/stoker-<uid>/flight.token}. */
    public static Path defaultPath(Map<String, String> env) {
        try {
            return SocketDir.defaultDir(env).resolve(NAME);
        } catch (IOException e) {
            throw new ConfigException("cannot find this user's id for the Flight token's folder: " + e.getMessage(), e);
        }
    }


    /**
     * The token in {@code file}, made there (and its folder, 0700) when missing; an existing file is
     * reused if it is private. The service's side.
     *
     * @throws ConfigException when the folder or the file is not this user's alone, or unreadable
     */
    public static Token ensure(Path file) {
        Path dir = file.toAbsolutePath().getParent();
        try {
            if (!Files.exists(dir, LinkOption.NOFOLLOW_LINKS))
                Files.createDirectories(dir, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
            checkFolder(dir);
            if (!Files.exists(file, LinkOption.NOFOLLOW_LINKS)) {
                Path tmp = Files.createTempFile(dir, "." + NAME + "-", ".tmp", PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
                try {
                    String token = FlightBatchServer.newToken();
                    Files.writeString(tmp, token + "\n", StandardCharsets.US_ASCII);
                    Files.createLink(file, tmp); // atomic: fails if another service made it first, whose token then wins
                    return new Token(token, file, true);
                } catch (FileAlreadyExistsException raced) {
                    // read theirs below
                } finally {
                    Files.deleteIfExists(tmp);
                }
            }
            return new Token(read(file, "the Flight token file"), file, false);
        } catch (IOException e) {
            throw new ConfigException("cannot make the Flight token file " + file + ": " + e.getMessage()
                    + " (pass --flight-token-file FILE or set $" + FlightAccess.TOKEN_ENV + ")", e);
        }
    }

    /**
     * The token a client of this user sends: {@value FlightAccess#TOKEN_ENV} or {@code file} (one of the
     * two), else the default file {@link #defaultPath} that a service of this user on this host made.
     *
     * @throws ConfigException when none is found or the file is not private; the message says where it looked
     */
    public static Token forClient(Path file, Map<String, String> env) {
        String fromEnv = env.get(FlightAccess.TOKEN_ENV);
        if (fromEnv != null && !fromEnv.isBlank()) {
            if (file != null) throw new ConfigException("give the Flight token one way: a token file or $" + FlightAccess.TOKEN_ENV + ", not both");
            String token = fromEnv.strip();
            checkToken(token, "$" + FlightAccess.TOKEN_ENV);
            return new Token(token, null, false);
        }
        Path path = file != null ? file : defaultPath(env);
        if (file == null && !Files.exists(path, LinkOption.NOFOLLOW_LINKS))
            throw new ConfigException("no Flight token: $" + FlightAccess.TOKEN_ENV + " is not set and " + path + " does not exist (a service "
                    + "started with --flight makes it there; for one on another host, or as another user, give its token)");
        if (file == null) checkFolder(path.getParent());
        return new Token(read(path, file != null ? "the token file" : "the Flight token file"), path, false);
    }

    /** Plaintext client options with the token {@link #forClient} finds (no file given): for a service of this user on this host. */
    public static dev.stoker.flight.FlightBatchClient.Options clientOptions(Map<String, String> env) {
        return new dev.stoker.flight.FlightBatchClient.Options(forClient(null, env).value(), false, null);
    }

    /**
     * The token in {@code file}: a regular file (not a link), this user's, that group and others can
     * neither read nor write, at most {@value #MAX_FILE_BYTES} bytes; errors name {@code what}.
     */
    static String read(Path file, String what) { return read(file, what, ", or remove it to have a new one made"); }

    /** As {@link #read(Path, String)}, the advice for a file open to others ending with {@code fix}. */
    static String read(Path file, String what, String fix) {
        String token = PrivateFile.read(file, what, MAX_FILE_BYTES, fix).strip();
        checkToken(token, what + " " + file);
        return token;
    }

    /** Refuses a folder that is a link, another user's, or open to group or others in any way. */
    static void checkFolder(Path dir) {
        PrivateFile.checkFolder(dir, PrivateFile.OTHERS, "the Flight token's folder", ", or pass --flight-token-file");
    }

    static String checkToken(String token, String from) {
        if (token.isEmpty()) throw new ConfigException(from + " is empty");
        try {
            FlightBatchServer.checkToken(token);
        } catch (IllegalArgumentException e) {
            throw new ConfigException(from + ": " + e.getMessage()); // the message never holds the token
        }
        return token;
    }
}
