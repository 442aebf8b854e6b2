package dev.stoker.cluster;

import dev.stoker.node.ConfigException;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.MessageDigest;
import java.security.PrivateKey;
import java.security.SecureRandom;
import java.security.cert.X509Certificate;
import java.util.Base64;
import java.util.HexFormat;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * A cluster key: the one secret every member of a Stoker cluster holds, from which the members
 * authenticate each other (Pekko Artery over TLS with mutual authentication) and encrypt the
 * nodes' Flight endpoints. Anyone holding the file can join the cluster; anyone without it cannot
 * complete a TLS handshake with a member.
 *
 * <p>What it is: a PKCS#12 keystore with one EC (P-256) key and a self-signed certificate for it
 * ({@code CN=stoker-cluster}, subject alternative name {@code DNS:stoker-cluster}), and the
 * keystore's random password. The file is text, one {@code name: value} a line after comment lines:
 * {@code stoker-cluster-key: 1}, {@code password: <hex>}, {@code pkcs12: <base64>}. The password
 * stored beside the keystore protects nothing on its own (it cannot: every member must read it
 * without a prompt); what protects the key is the file's mode, 0600, checked on every load, like
 * ssh's private keys. {@code base64 -d} of the last line gives a keystore {@code keytool -list}
 * reads with that password.
 *
 * <p>Why keytool: the JDK has no public API that signs a certificate, and BouncyCastle's bcpkix is
 * not a dependency of Stoker (only bcprov is, through another library). {@code keytool}, from the
 * JDK that runs Stoker ({@code java.home}), makes the keystore in a private temporary folder; its
 * password goes through the environment, never the command line where {@code ps} would show it.
 *
 * <p>Where none is given, members one user starts on one host share a per-user key made on first
 * use, {@code $XDG_CONFIG_HOME/stoker/cluster.key} (else {@code ~/.config/stoker/cluster.key}), in
 * a folder of mode 0700 ({@link #userDefault}). Members bound to or joining other hosts must be
 * given one explicitly (refused otherwise, by {@link ClusteredNode}).
 *
 * <p>Threading: immutable, thread-safe. {@link #toString()} never shows the password.
 */
public final class ClusterKey {
    /** The name in the certificate (and the TLS server name the nodes' Flight clients check). */
    public static final String NAME = "stoker-cluster";
    /** The file name of the per-user key. */
    public static final String USER_FILE = "cluster.key";
    /** Longest key file read (a key is about 2 KiB). */
    static final int MAX_FILE_BYTES = 64 << 10;
    private static final String ALIAS = "stoker-cluster";
    private static final String MAGIC = "stoker-cluster-key: 1";

    private final Path file;
    private final String password;
    private final byte[] pkcs12;
    private final PrivateKey privateKey;
    private final X509Certificate certificate;

    private ClusterKey(Path file, String password, byte[] pkcs12) {
        this.file = file;
        this.password = password;
        this.pkcs12 = pkcs12.clone();
        try {
            var ks = KeyStore.getInstance("PKCS12");
            ks.load(new ByteArrayInputStream(pkcs12), password.toCharArray());
            if (!(ks.getKey(ALIAS, password.toCharArray()) instanceof PrivateKey key)
                    || !(ks.getCertificate(ALIAS) instanceof X509Certificate cert))
                throw new ConfigException("cluster key " + file + " holds no key '" + ALIAS + "' with a certificate; make one with "
                        + "stoker cluster-key FILE");
            this.privateKey = key;
            this.certificate = cert;
        } catch (IOException | GeneralSecurityException e) {
            throw new ConfigException("cluster key " + file + " is not a readable keystore (" + e.getClass().getSimpleName() + "); make "
                    + "one with stoker cluster-key FILE");
        }
    }

    /**
     * Makes a new key in {@code file}, mode 0600, refusing to overwrite anything there.
     *
     * @throws ConfigException when the file exists, its folder is missing, or keytool fails
     */
    public static ClusterKey create(Path file) {
        if (Files.exists(file, LinkOption.NOFOLLOW_LINKS))
            throw new ConfigException(file + " exists; stoker cluster-key does not overwrite a key (members hold it): remove it first "
                    + "or name another file");
        Path parent = file.toAbsolutePath().getParent();
        if (parent == null || !Files.isDirectory(parent)) throw new ConfigException("no folder " + parent + " for the cluster key " + file);
        String text = generate();
        try {
            // created 0600 in one step (no moment when others could open it), and never over an existing file
            Files.writeString(Files.createFile(file, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------"))),
                    text, StandardCharsets.UTF_8);
        } catch (FileAlreadyExistsException e) {
            throw new ConfigException(file + " exists; stoker cluster-key does not overwrite a key: remove it first or name another file");
        } catch (IOException e) {
            throw new ConfigException("cannot write the cluster key " + file + ": " + e.getMessage());
        }
        return load(file);
    }

    /**
     * Reads the key in {@code file}, which must be a regular file owned by this user and open to nobody else (no group or
     * other permission bits).
     *
     * @throws ConfigException naming the file and what is wrong; never holding the password
     */
    public static ClusterKey load(Path file) {
        String text = dev.stoker.node.PrivateFile.read(file, "cluster key", MAX_FILE_BYTES, "");
        String password = null, pkcs12 = null;
        boolean magic = false;
        for (String line : text.split("\n")) {
            String l = line.strip();
            if (l.isEmpty() || l.startsWith("#")) continue;
            if (l.equals(MAGIC)) magic = true;
            else if (l.startsWith("password:")) password = l.substring("password:".length()).strip();
            else if (l.startsWith("pkcs12:")) pkcs12 = l.substring("pkcs12:".length()).strip();
        }
        if (!magic || password == null || password.isEmpty() || pkcs12 == null)
            throw new ConfigException("cluster key " + file + " is not a Stoker cluster key (want the lines '" + MAGIC
                    + "', 'password: …' and 'pkcs12: …'; make one with stoker cluster-key FILE)");
        byte[] der;
        try {
            der = Base64.getDecoder().decode(pkcs12);
        } catch (IllegalArgumentException e) {
            throw new ConfigException("cluster key " + file + ": its pkcs12 line is not base64");
        }
        return new ClusterKey(file, password, der);
    }

    /** Where the per-user key lives by {@code env}: {@code $XDG_CONFIG_HOME/stoker/cluster.key}, else {@code ~/.config/stoker/cluster.key}. */
    public static Path userDefaultPath(Map<String, String> env) {
        String xdg = env.get("XDG_CONFIG_HOME");
        Path config = xdg != null && !xdg.isBlank() && Path.of(xdg).isAbsolute() ? Path.of(xdg)
                : Path.of(System.getProperty("user.home"), ".config");
        return config.resolve("stoker").resolve(USER_FILE);
    }

    /**
     * The per-user key at {@link #userDefaultPath}, made on first use: its folder is made 0700 (an existing one must be this
     * user's and writable by nobody else), and members starting at once agree on one key (it is written aside and linked
     * into place, which fails for all but the first).
     */
    public static ClusterKey userDefault(Map<String, String> env) {
        Path file = userDefaultPath(env);
        Path dir = file.getParent();
        try {
            if (!Files.exists(dir, LinkOption.NOFOLLOW_LINKS)) {
                Files.createDirectories(dir.getParent());
                try {
                    Files.createDirectory(dir, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
                } catch (FileAlreadyExistsException raced) {
                    // another member made it: checked below
                }
            }
            dev.stoker.node.PrivateFile.checkFolder(dir, dev.stoker.node.PrivateFile.OTHERS_WRITE, "the per-user cluster key's folder",
                    ", or pass --cluster-key FILE");
            if (!Files.exists(file, LinkOption.NOFOLLOW_LINKS)) {
                Path aside = dir.resolve(USER_FILE + "." + ProcessHandle.current().pid() + ".new");
                Files.deleteIfExists(aside);
                create(aside);
                try {
                    Files.createLink(file, aside); // atomic, and never over another member's key
                } catch (FileAlreadyExistsException raced) {
                    // another member made it first: use theirs
                } finally {
                    Files.deleteIfExists(aside);
                }
            }
        } catch (IOException e) {
            throw new ConfigException("cannot make the per-user cluster key " + file + ": " + e.getMessage() + "; pass --cluster-key FILE");
        }
        return load(file);
    }

    /** Runs the JDK's keytool to make the keystore; the file's text. */
    private static String generate() {
        String password = HexFormat.of().formatHex(randomBytes(24));
        Path keytool = Path.of(System.getProperty("java.home"), "bin", "keytool");
        if (!Files.isExecutable(keytool)) throw new ConfigException("cannot make a cluster key: no " + keytool + " in the JDK running Stoker");
        Path dir = null;
        try {
            dir = Files.createTempDirectory("stoker-cluster-key", PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
            Path store = dir.resolve("key.p12"), log = dir.resolve("keytool.log");
            var pb = new ProcessBuilder(keytool.toString(), "-genkeypair", "-alias", ALIAS, "-keyalg", "EC", "-groupname", "secp256r1",
                    "-sigalg", "SHA256withECDSA", "-dname", "CN=" + NAME, "-ext", "SAN=dns:" + NAME, "-validity", "10000",
                    "-storetype", "PKCS12", "-keystore", store.toString(), "-storepass:env", "STOKER_KEYTOOL_PASS",
                    "-keypass:env", "STOKER_KEYTOOL_PASS", "-noprompt").redirectErrorStream(true).redirectOutput(log.toFile());
            pb.environment().put("STOKER_KEYTOOL_PASS", password);
            var p = pb.start();
            if (!p.waitFor(120, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                throw new ConfigException("cannot make a cluster key: keytool did not finish within 120 s");
            }
            if (p.exitValue() != 0 || !Files.isRegularFile(store))
                throw new ConfigException("cannot make a cluster key: keytool exited " + p.exitValue() + ": "
                        + Files.readString(log).strip().lines().limit(5).reduce((a, b) -> a + " / " + b).orElse(""));
            byte[] der = Files.readAllBytes(store);
            return "# Stoker cluster key, made by `stoker cluster-key`: a PKCS#12 keystore (one EC key, self-signed certificate CN=" + NAME
                    + ")\n# and its password. Whoever holds this file can join the cluster: keep it mode 0600, copy it to every member\n"
                    + "# (scp -p) and pass --cluster-key FILE. `base64 -d` of the pkcs12 line gives a keystore keytool reads.\n"
                    + MAGIC + "\npassword: " + password + "\npkcs12: " + Base64.getEncoder().encodeToString(der) + "\n";
        } catch (IOException e) {
            throw new ConfigException("cannot make a cluster key: " + e.getMessage());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new ConfigException("interrupted while making a cluster key");
        } finally {
            if (dir != null) deleteTree(dir);
        }
    }

    private static byte[] randomBytes(int n) {
        var b = new byte[n];
        new SecureRandom().nextBytes(b);
        return b;
    }


    static void deleteTree(Path dir) {
        try (var files = Files.walk(dir)) {
            for (Path p : files.sorted(java.util.Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
        } catch (IOException | java.io.UncheckedIOException e) {
            // a temp folder left behind is mode 0700; nothing more to do
        }
    }

    /** The file this key was read from. */
    public Path file() { return file; }

    /** The certificate every member presents and trusts. */
    public X509Certificate certificate() { return certificate; }

    /** SHA-256 of the certificate, hex with colons (as {@code keytool -list} shows it): to compare two members' keys. */
    public String fingerprint() {
        try {
            return HexFormat.ofDelimiter(":").withUpperCase().formatHex(MessageDigest.getInstance("SHA-256").digest(certificate.getEncoded()));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * The Flight token the nodes use where no {@code --cluster-token-file} is given: derived from the key (SHA-256 over a
     * label, the password and the keystore), so that every member, and only a holder of the key, knows it.
     */
    public String flightToken() {
        try {
            var md = MessageDigest.getInstance("SHA-256");
            md.update("stoker cluster flight token v1\0".getBytes(StandardCharsets.US_ASCII));
            md.update(password.getBytes(StandardCharsets.US_ASCII));
            md.update(pkcs12);
            return HexFormat.of().formatHex(md.digest());
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * Writes what Pekko and Flight read from files into a new private folder (0700, the files 0600): the keystore, a trust
     * store holding only the certificate, and the certificate and key as PEM. Closing deletes it.
     */
    TlsFiles materialize() throws IOException {
        Path dir = Files.createTempDirectory("stoker-cluster-tls", PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
        try {
            var own = PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------"));
            Path keyStore = Files.write(Files.createFile(dir.resolve("key.p12"), own), pkcs12);
            var trust = KeyStore.getInstance("PKCS12");
            trust.load(null, null);
            trust.setCertificateEntry(ALIAS, certificate);
            var bytes = new ByteArrayOutputStream();
            trust.store(bytes, password.toCharArray());
            Path trustStore = Files.write(Files.createFile(dir.resolve("trust.p12"), own), bytes.toByteArray());
            Path cert = Files.writeString(Files.createFile(dir.resolve("cert.pem"), own), pem("CERTIFICATE", certificate.getEncoded()));
            Path key = Files.writeString(Files.createFile(dir.resolve("key.pem"), own), pem("PRIVATE KEY", privateKey.getEncoded()));
            return new TlsFiles(dir, keyStore, trustStore, cert, key, password);
        } catch (IOException | GeneralSecurityException | RuntimeException e) {
            deleteTree(dir);
            throw e instanceof IOException io ? io : new IOException("cannot write the cluster key's TLS files: " + e, e);
        }
    }

    private static String pem(String type, byte[] der) {
        return "-----BEGIN " + type + "-----\n" + Base64.getMimeEncoder(64, new byte[]{'\n'}).encodeToString(der) + "\n-----END " + type + "-----\n";
    }

    /**
     * The key's TLS files in a private folder, for the libraries that read files: Pekko's {@code ConfigSSLEngineProvider}
     * (keystore, trust store, password) and Flight (PEM certificate and PKCS#8 key). {@link #close()} deletes them.
     */
    record TlsFiles(Path dir, Path keyStore, Path trustStore, Path certificatePem, Path privateKeyPem, String password) implements AutoCloseable {
        @Override
        public void close() { deleteTree(dir); }

        @Override
        public String toString() { return "ClusterKey.TlsFiles[" + dir + "]"; }
    }

    /** Never the password. */
    @Override
    public String toString() { return "ClusterKey[" + file + ", " + fingerprint() + "]"; }

    /** Two keys are equal when their keystores are (two loads of one file). */
    @Override
    public boolean equals(Object o) { return o instanceof ClusterKey k && java.util.Arrays.equals(pkcs12, k.pkcs12); }

    @Override
    public int hashCode() { return java.util.Arrays.hashCode(pkcs12); }
}
