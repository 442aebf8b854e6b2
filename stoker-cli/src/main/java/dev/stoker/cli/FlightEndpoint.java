package dev.stoker.cli;

import dev.stoker.flight.FlightBatchServer;
import java.io.IOException;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.arrow.flight.Location;

/**
 * Where and how {@code serve --flight} listens, decided before the pipeline starts so that a refused
 * endpoint costs nothing (exit status 2, one line saying what to pass).
 *
 * <p>Policy: an endpoint only this host can reach (every address of HOST a loopback one; {@code
 * --flight PORT} means 127.0.0.1) is open to any local process, like the Unix socket. Any other
 * address, the wildcards {@code 0.0.0.0} and {@code ::} included, needs a token, read from {@code
 * --flight-token-file} or {@code $STOKER_FLIGHT_TOKEN} and never from the command line, where
 * {@code ps} would show it. The token file must not be readable or writable by group or others
 * (refused, as ssh refuses such a key: a token others can read is no token). TLS is optional; a
 * token sent over a network in plaintext draws a warning but is allowed (e.g. inside a private
 * cluster network).
 *
 * @param host     the address to bind, as given (or 127.0.0.1)
 * @param port     the port; 0 picks a free one
 * @param loopback whether only this host can reach it
 * @param security the token and TLS files; its toString hides the token
 * @param warnings lines for stderr
 */
record FlightEndpoint(String host, int port, boolean loopback, FlightBatchServer.Security security, List<String> warnings) {
    /** The environment variable that can hold the token instead of a file. */
    static final String TOKEN_ENV = "STOKER_FLIGHT_TOKEN";
    private static final Set<PosixFilePermission> OTHERS = EnumSet.of(PosixFilePermission.GROUP_READ, PosixFilePermission.GROUP_WRITE,
            PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE);

    /**
     * Applies the policy to {@code serve}'s options.
     *
     * @param spec      {@code --flight}: PORT, HOST:PORT or [IPv6]:PORT
     * @param tokenFile {@code --flight-token-file}, or null
     * @param tlsCert   {@code --flight-tls-cert} (PEM chain), or null
     * @param tlsKey    {@code --flight-tls-key} (PEM private key), or null
     * @param env       the environment ({@value #TOKEN_ENV})
     * @throws Main.InvalidInputException when the endpoint is refused; the message never holds the token
     */
    static FlightEndpoint plan(String spec, Path tokenFile, Path tlsCert, Path tlsKey, Map<String, String> env) {
        String host;
        String port;
        String s = spec.strip();
        if (s.chars().allMatch(Character::isDigit) && !s.isEmpty()) {
            host = "127.0.0.1";
            port = s;
        } else if (s.startsWith("[") && s.contains("]:")) {
            host = s.substring(1, s.indexOf("]:"));
            port = s.substring(s.indexOf("]:") + 2);
        } else if (s.indexOf(':') > 0 && s.indexOf(':') == s.lastIndexOf(':')) {
            host = s.substring(0, s.indexOf(':'));
            port = s.substring(s.indexOf(':') + 1);
        } else {
            throw new Main.InvalidInputException("--flight must be PORT, HOST:PORT or [IPv6]:PORT, got '" + spec + "'");
        }
        int portNumber;
        try {
            portNumber = Integer.parseInt(port);
        } catch (NumberFormatException e) {
            portNumber = -1;
        }
        if (portNumber < 0 || portNumber > 65535) throw new Main.InvalidInputException("--flight: bad port '" + port + "' in '" + spec + "'");
        boolean loopback = isLoopback(host);

        String envToken = env.get(TOKEN_ENV);
        if (envToken != null && envToken.isEmpty()) envToken = null;
        if (tokenFile != null && envToken != null)
            throw new Main.InvalidInputException("give the Flight token one way: --flight-token-file or $" + TOKEN_ENV + ", not both");
        String token = tokenFile != null ? readToken(tokenFile) : envToken != null ? checked(envToken.strip(), "$" + TOKEN_ENV) : null;
        if (!loopback && token == null)
            throw new Main.InvalidInputException("--flight " + spec + " can be reached from other hosts, so it needs a token: pass "
                    + "--flight-token-file FILE (mode 0600; e.g. openssl rand -hex 32 > FILE) or set $" + TOKEN_ENV
                    + ", and --flight-tls-cert/--flight-tls-key to encrypt the connection; or bind 127.0.0.1");

        if ((tlsCert == null) != (tlsKey == null))
            throw new Main.InvalidInputException("--flight-tls-cert and --flight-tls-key go together");
        for (Path p : tlsCert == null ? List.<Path>of() : List.of(tlsCert, tlsKey))
            if (!Files.isReadable(p)) throw new Main.InvalidInputException("cannot read " + p + " (--flight-tls-cert/--flight-tls-key)");

        var warnings = new ArrayList<String>();
        if (!loopback && tlsCert == null)
            warnings.add("warning: --flight " + spec + " is plaintext: the token and the batches cross the network unencrypted; "
                    + "pass --flight-tls-cert and --flight-tls-key to encrypt them");
        return new FlightEndpoint(host, portNumber, loopback, new FlightBatchServer.Security(token, tlsCert, tlsKey), List.copyOf(warnings));
    }

    /** Where the server binds: {@code grpc+tls://} with TLS, else {@code grpc+tcp://}. */
    Location location() { return security.tls() ? Location.forGrpcTls(host, port) : Location.forGrpcInsecure(host, port); }

    /** What trainers connect to, with the bound port. */
    String url(int boundPort) {
        String h = host.contains(":") ? "[" + host + "]" : host;
        return (security.tls() ? "grpc+tls://" : "grpc://") + h + ":" + boundPort;
    }

    /** True when every address HOST names is a loopback one (so neither a wildcard nor a name that also resolves elsewhere). */
    static boolean isLoopback(String host) {
        try {
            for (InetAddress a : InetAddress.getAllByName(host)) if (!a.isLoopbackAddress()) return false;
            return true;
        } catch (UnknownHostException e) {
            throw new Main.InvalidInputException("--flight: cannot resolve host '" + host + "'");
        }
    }

    static String readToken(Path file) { return readToken(file, "--flight-token-file"); }

    /** The token in {@code file}, which must be this user's alone; errors name {@code option}. */
    static String readToken(Path file, String option) {
        if (!Files.isRegularFile(file)) throw new Main.InvalidInputException(option + " " + file + " is not a file");
        try {
            Set<PosixFilePermission> mode = Files.getPosixFilePermissions(file);
            if (!java.util.Collections.disjoint(mode, OTHERS))
                throw new Main.InvalidInputException(option + " " + file + " is open to other users (mode "
                        + PosixFilePermissions.toString(mode) + "); run chmod 600 " + file);
            return checked(Files.readString(file, StandardCharsets.UTF_8).strip(), option + " " + file);
        } catch (UnsupportedOperationException e) {
            throw new Main.InvalidInputException(option + " " + file + ": its permissions cannot be checked on this file system");
        } catch (IOException e) {
            throw new Main.InvalidInputException("cannot read " + option + " " + file + ": " + e.getMessage());
        }
    }

    static String checked(String token, String from) {
        if (token.isEmpty()) throw new Main.InvalidInputException(from + " is empty");
        try {
            FlightBatchServer.checkToken(token);
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException(from + ": " + e.getMessage()); // the message never holds the token
        }
        return token;
    }
}
