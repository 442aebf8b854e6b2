package dev.stoker.testkit;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;

/**
 * A self-signed certificate for {@code localhost} and {@code 127.0.0.1}, made by {@code openssl} in
 * a test's temporary folder, so that no private key is committed. A test that needs one is skipped
 * (with the reason) where {@code openssl} is missing.
 *
 * @param certificate PEM certificate: the server's chain and the client's trusted certificate alike
 * @param privateKey  PEM private key (PKCS#8, unencrypted)
 */
public record TestCertificate(Path certificate, Path privateKey) {
    /** Makes a fresh RSA-2048 key and a certificate valid for a day in {@code dir}. */
    public static TestCertificate create(Path dir) throws IOException, InterruptedException {
        Path openssl = List.of(Path.of("/usr/bin/openssl"), Path.of("/usr/local/bin/openssl")).stream()
                .filter(Files::isExecutable).findFirst().orElse(null);
        Assumptions.assumeTrue(openssl != null, "openssl is not installed: no certificate for the TLS test");
        Path cert = dir.resolve("cert.pem"), key = dir.resolve("key.pem"), log = dir.resolve("openssl.log");
        Process p = new ProcessBuilder(openssl.toString(), "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
                "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-days", "1", "-keyout", key.toString(), "-out", cert.toString())
                .redirectErrorStream(true).redirectOutput(log.toFile()).start();
        if (!p.waitFor(60, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new IOException("openssl did not finish in 60 s");
        }
        if (p.exitValue() != 0 || !Files.exists(cert) || !Files.exists(key))
            throw new IOException("openssl failed (" + p.exitValue() + "): " + Files.readString(log, StandardCharsets.UTF_8));
        return new TestCertificate(cert, key);
    }
}
