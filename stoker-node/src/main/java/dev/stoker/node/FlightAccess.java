package dev.stoker.node;

import dev.stoker.flight.FlightBatchServer;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.arrow.flight.Location;

/**
 * Who may reach a node's Arrow Flight endpoint, decided before any work starts so that a refused
 * endpoint costs nothing. One rule for the local service's {@code --flight} and for a cluster
 * node's endpoint; embedders launching a {@link StokerNode} get it too.
 *
 * <p>Policy: every endpoint needs a token (audit #9: a loopback endpoint without one let any local
 * user take a rank's batches), read from a file or the environment and never from the command line,
 * where {@code ps} would show it. An endpoint only this host can reach (every address of HOST a
 * loopback one; {@code --flight PORT} means 127.0.0.1) given none uses this user's default token
 * file, made on first use ({@link FlightTokenFile}: 0600 in the user's 0700 runtime folder), which
 * this user's clients on this host find by themselves. Any other address, the wildcards {@code
 * 0.0.0.0} and {@code ::} included, needs the token given, since its clients are elsewhere. The token file
 * must not be readable or writable by group or others (refused, as ssh refuses such a key: a token
 * others can read is no token). TLS is optional; a token sent over a network in plaintext draws a
 * warning but is allowed (e.g. inside a private cluster network).
 *
 * @param host     the address to bind, as given (or 127.0.0.1)
 * @param port     the port; 0 picks a free one
 * @param loopback whether only this host can reach it
 * @param security  the token and TLS files; its toString hides the token
 * @param tokenFile where the token came from: the default file (or the file given); null from the environment
 * @param warnings  lines for the log
 */
public record FlightAccess(String host, int port, boolean loopback, FlightBatchServer.Security security, Path tokenFile,
                           List<String> warnings) {
    /** The environment variable that can hold the local service's Flight token instead of a file. */
    public static final String TOKEN_ENV = "STOKER_FLIGHT_TOKEN";
    /** The environment variable that can hold the cluster's token instead of {@code --cluster-token-file}. */
    public static final String CLUSTER_TOKEN_ENV = "STOKER_CLUSTER_TOKEN";

    /** The host and port of {@code --flight}: PORT, HOST:PORT or [IPv6]:PORT. */
    record Address(String host, int port) {}

    /** Checks the syntax of a {@code --flight} value (no name is resolved); IllegalArgumentException says what is wrong. */
    static String checkSpec(String spec) {
        address(spec);
        return spec;
    }

    static Address address(String spec) {
        String s = spec.strip();
        String host;
        String port;
        if (!s.isEmpty() && s.chars().allMatch(Character::isDigit)) {
            host = "127.0.0.1";
            port = s;
        } else if (s.startsWith("[") && s.contains("]:")) {
            host = s.substring(1, s.indexOf("]:"));
            port = s.substring(s.indexOf("]:") + 2);
        } else if (s.indexOf(':') > 0 && s.indexOf(':') == s.lastIndexOf(':')) {
            host = s.substring(0, s.indexOf(':'));
            port = s.substring(s.indexOf(':') + 1);
        } else {
            throw new IllegalArgumentException("must be PORT, HOST:PORT or [IPv6]:PORT, got '" + spec + "'");
        }
        int number;
        try {
            number = Integer.parseInt(port);
        } catch (NumberFormatException e) {
            number = -1;
        }
        if (number < 0 || number > 65535) throw new IllegalArgumentException("bad port '" + port + "' in '" + spec + "'");
        return new Address(host, number);
    }

    /**
     * The local service's endpoint by {@code config} ({@code --flight}, its token file and TLS files),
     * or null without {@code --flight}; {@code env} may hold {@value #TOKEN_ENV}.
     *
     * @throws ConfigException when the endpoint is refused; the message never holds the token
     */
    public static FlightAccess plan(NodeConfig config, Map<String, String> env) {
        String spec = config.get(NodeConfig.FLIGHT);
        if (spec == null) return null;
        Address a;
        try {
            a = address(spec);
        } catch (IllegalArgumentException e) {
            throw new ConfigException("--flight: " + e.getMessage());
        }
        boolean loopback = isLoopback(a.host(), "--flight");
        Path tokenFile = config.get(NodeConfig.FLIGHT_TOKEN_FILE);
        String token = token(tokenFile, "--flight-token-file", env, TOKEN_ENV);
        if (loopback && token == null) { // this user's default token (audit #9: no endpoint without one)
            var made = FlightTokenFile.ensure(FlightTokenFile.defaultPath(env));
            token = made.value();
            tokenFile = made.file();
        }
        if (!loopback && token == null)
            throw new ConfigException("--flight " + spec + " can be reached from other hosts, so it needs a token: pass "
                    + "--flight-token-file FILE (mode 0600; e.g. openssl rand -hex 32 > FILE) or set $" + TOKEN_ENV
                    + ", and --flight-tls-cert/--flight-tls-key to encrypt the connection; or bind 127.0.0.1");
        Path cert = config.get(NodeConfig.FLIGHT_TLS_CERT), key = config.get(NodeConfig.FLIGHT_TLS_KEY);
        if ((cert == null) != (key == null)) throw new ConfigException("--flight-tls-cert and --flight-tls-key go together");
        for (Path p : cert == null ? List.<Path>of() : List.of(cert, key))
            if (!Files.isReadable(p)) throw new ConfigException("cannot read " + p + " (--flight-tls-cert/--flight-tls-key)");
        var warnings = new ArrayList<String>();
        if (!loopback && cert == null)
            warnings.add("warning: --flight " + spec + " is plaintext: the token and the batches cross the network unencrypted; "
                    + "pass --flight-tls-cert and --flight-tls-key to encrypt them");
        return new FlightAccess(a.host(), a.port(), loopback, new FlightBatchServer.Security(token, cert, key), tokenFile, List.copyOf(warnings));
    }

    /**
     * The cluster token of {@code config} ({@code --cluster-token-file} or {@value #CLUSTER_TOKEN_ENV}); required when the
     * member binds {@code host}, an address other hosts can reach. Null: none (loopback only).
     */
    public static String clusterToken(NodeConfig config, String host, Map<String, String> env) {
        String token = token(config.get(NodeConfig.CLUSTER_TOKEN_FILE), "--cluster-token-file", env, CLUSTER_TOKEN_ENV);
        if (token == null && !isLoopback(host, "--bind"))
            throw new ConfigException("--bind " + config.get(NodeConfig.BIND) + " can be reached from other hosts, so the nodes' Flight "
                    + "endpoints need a token: pass --cluster-token-file FILE (mode 0600, the same on every node; e.g. openssl rand "
                    + "-hex 32 > FILE) or set $" + CLUSTER_TOKEN_ENV + "; or bind 127.0.0.1");
        return token;
    }

    /** Where the server binds: {@code grpc+tls://} with TLS, else {@code grpc+tcp://}. */
    public Location location() { return security.tls() ? Location.forGrpcTls(host, port) : Location.forGrpcInsecure(host, port); }

    /** What trainers connect to, with the bound port. */
    public String url(int boundPort) {
        String h = host.contains(":") ? "[" + host + "]" : host;
        return (security.tls() ? "grpc+tls://" : "grpc://") + h + ":" + boundPort;
    }

    /** True when every address HOST names is a loopback one (so neither a wildcard nor a name that also resolves elsewhere). */
    public static boolean isLoopback(String host, String option) {
        try {
            for (InetAddress a : InetAddress.getAllByName(host)) if (!a.isLoopbackAddress()) return false;
            return true;
        } catch (UnknownHostException e) {
            throw new ConfigException(option + ": cannot resolve host '" + host + "'");
        }
    }

    /** The token from {@code file} or the environment variable {@code envName}, one of the two; null when neither is given. */
    private static String token(Path file, String option, Map<String, String> env, String envName) {
        String fromEnv = env.get(envName);
        if (fromEnv != null && fromEnv.isEmpty()) fromEnv = null;
        if (file != null && fromEnv != null)
            throw new ConfigException("give the token one way: " + option + " or $" + envName + ", not both");
        return file != null ? readToken(file, option) : fromEnv != null ? checked(fromEnv.strip(), "$" + envName) : null;
    }

    /** The token in {@code file}, which must be this user's alone ({@link PrivateFile}); errors name {@code option}. */
    public static String readToken(Path file, String option) { return FlightTokenFile.read(file, option, ""); }

    private static String checked(String token, String from) { return FlightTokenFile.checkToken(token, from); }
}
