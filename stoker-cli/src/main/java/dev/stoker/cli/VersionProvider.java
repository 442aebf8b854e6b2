package dev.stoker.cli;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Properties;
import picocli.CommandLine;
import picocli.CommandLine.IVersionProvider;

/**
 * What {@code stoker --version} prints: {@code stoker X.Y.Z}, the release version the build wrote into
 * {@code version.properties} from its one definition ({@code .mvn/maven.config}), so that the CLI, the
 * jars and the Python client cannot name different releases.
 */
public final class VersionProvider implements IVersionProvider {
    /** The release version, e.g. {@code 0.3.0}. */
    public static String version() {
        try (InputStream in = VersionProvider.class.getResourceAsStream("version.properties")) {
            if (in == null) throw new IllegalStateException("version.properties missing from the stoker-cli jar");
            var p = new Properties();
            p.load(in);
            String v = p.getProperty("version", "");
            // an unfiltered copy (an IDE build that skipped Maven's resource filtering) must not pass for a version
            if (!v.matches("\\d+\\.\\d+\\.\\d+")) throw new IllegalStateException("version.properties holds '" + v + "', not MAJOR.MINOR.PATCH");
            return v;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public String[] getVersion() { return new String[] {"stoker " + version()}; }

    /**
     * Gives every subcommand the release version too: picocli's standard {@code --version} of a subcommand
     * without one of its own prints nothing ({@code stoker serve --version} printed an empty line).
     */
    static void install(CommandLine cli) {
        var spec = cli.getCommandSpec();
        if (spec.version().length == 0) spec.versionProvider(new VersionProvider());
        for (CommandLine sub : cli.getSubcommands().values()) install(sub);
    }
}
