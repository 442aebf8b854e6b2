package dev.stoker.source;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** Opens the {@link ObjectSource} for a data set location. */
public final class ObjectSources {
    private static final Logger LOG = LoggerFactory.getLogger(ObjectSources.class);

    private ObjectSources() { }

    /**
     * A source rooted at {@code location}'s folder; it reads local files and S3 objects alike
     * (a local data set may reference {@code s3://} objects and vice versa), all counted in one
     * {@link SourceMetrics} and bounded together by {@link SourceConfig#maxInFlight()}.
     */
    public static ObjectSource open(DatasetLocation location, SourceConfig config) {
        var ctx = new FetchContext(config);
        try {
            ObjectSource source = switch (location) {
                case DatasetLocation.Local local -> new LocalObjectSource(local, ctx);
                case DatasetLocation.S3 s3 -> new S3ObjectSource(s3, ctx);
            };
            LOG.debug("opened {} with {}", source, config);
            return source;
        } catch (RuntimeException e) {
            ctx.close();
            throw e;
        }
    }

    /** {@link #open(DatasetLocation, SourceConfig)} for {@link DatasetLocation#parse(String) a manifest URI}. */
    public static ObjectSource open(String manifestUri, SourceConfig config) {
        return open(DatasetLocation.parse(manifestUri), config);
    }
}
