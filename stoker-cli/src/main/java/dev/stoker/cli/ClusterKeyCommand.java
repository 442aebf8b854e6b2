package dev.stoker.cli;

import dev.stoker.cluster.ClusterKey;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/**
 * {@code stoker cluster-key FILE}: makes a new cluster key ({@link ClusterKey#create}) that every
 * member of one cluster is then given with {@code --cluster-key FILE}. The file is made with mode
 * 0600 and never overwrites an existing one (the members of a running cluster hold that key).
 */
@Command(name = "cluster-key", mixinStandardHelpOptions = true,
        description = {"Make a cluster key FILE (mode 0600): a PKCS#12 keystore with a self-signed certificate, and its password.",
                "Copy it to every member (scp -p) and pass --cluster-key FILE to stoker node and serve --join: members "
                        + "authenticate each other with it (TLS, both ways) and the nodes' Flight endpoints use its certificate. "
                        + "Whoever holds it can join the cluster. An existing FILE is never overwritten."})
final class ClusterKeyCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "FILE", description = "Where to write the key (must not exist).")
    Path file;

    @Override
    public Integer call() {
        var key = ClusterKey.create(file); // ConfigException (exit 2) when FILE exists or keytool fails
        spec.commandLine().getOut().println("wrote cluster key " + file + " (mode 0600), certificate SHA-256 " + key.fingerprint()
                + "; copy it to every member (scp -p) and pass --cluster-key " + file);
        return 0;
    }
}
