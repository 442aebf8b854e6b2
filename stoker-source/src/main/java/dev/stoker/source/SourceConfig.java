package dev.stoker.source;

import java.net.URI;

/**
 * How samples are fetched: S3 endpoint, region, addressing and credentials, the in-flight bound,
 * per-request timeout, the retry policy and an optional modelled first-byte latency; validated once
 * on construction.
 *
 * <p>Defaults: no endpoint override (AWS), region {@value #REGION_DEFAULT}, virtual-hosted
 * addressing, credentials from the SDK's default provider chain (environment, system properties,
 * profile files, web identity, container and instance roles), {@value #MAX_IN_FLIGHT_DEFAULT}
 * requests in flight, {@value #REQUEST_TIMEOUT_MILLIS_DEFAULT} ms per attempt,
 * {@value #MAX_RETRIES_DEFAULT} retries with exponential backoff from
 * {@value #BASE_BACKOFF_MILLIS_DEFAULT} ms (full jitter, capped at
 * {@value #MAX_BACKOFF_MILLIS_DEFAULT} ms), objects up to {@value #MAX_OBJECT_BYTES_DEFAULT} bytes,
 * no added latency, local reads given up after {@value #LOCAL_READ_TIMEOUT_MILLIS_DEFAULT} ms, and a manifest's
 * {@code file://} and {@code s3://} references confined to its data root (files) and bucket (objects).
 *
 * <p>Credentials never reach a log or a message: {@link #toString()} shows neither the secret key nor
 * more than the last four characters of the key id (as {@code aws configure list} does), and an
 * endpoint that carries credentials of its own ({@code user:password@host}) is refused without
 * being echoed.
 *
 * @param endpointOverride   S3 endpoint (http or https, e.g. MinIO or S3Mock); null for AWS
 * @param region             signing region
 * @param pathStyle          {@code endpoint/bucket/key} addressing instead of {@code bucket.endpoint/key}
 * @param accessKeyId        static access key id; null (with a null secret) for the default chain
 * @param secretAccessKey    static secret key; null (with a null key id) for the default chain
 * @param maxInFlight        most fetches started and not yet finished (also the HTTP connection pool size)
 * @param requestTimeoutMillis limit on one attempt, from sending the request to the last byte
 * @param maxRetries         attempts after the first one for retryable failures (5xx, throttling, timeouts, I/O errors)
 * @param baseBackoffMillis  backoff before retry n (0-based) is uniform in [0, min(max, base * 2^n)]
 * @param maxBackoffMillis   cap on the backoff
 * @param maxObjectBytes     larger objects fail instead of being buffered
 * @param fetchLatencyMillis added delay before each object's first byte, holding its in-flight slot but no thread
 * @param localReadTimeoutMillis limit on one local read (a file or a record's range), from opening it to its last byte;
 *                           past it the sample fails and its reader thread is interrupted (a hung network file system)
 * @param refsOutsideRoot    let a manifest's {@code file://} references name files outside its data root and its
 *                           {@code s3://} references objects of other buckets (the manifest is then trusted like the
 *                           command line); relative and plain absolute paths stay confined either way
 */
public record SourceConfig(
        URI endpointOverride,
        String region,
        boolean pathStyle,
        String accessKeyId,
        String secretAccessKey,
        int maxInFlight,
        long requestTimeoutMillis,
        int maxRetries,
        long baseBackoffMillis,
        long maxBackoffMillis,
        long maxObjectBytes,
        long fetchLatencyMillis,
        long localReadTimeoutMillis,
        boolean refsOutsideRoot) {

    public static final String REGION_DEFAULT = "us-east-1";
    public static final int MAX_IN_FLIGHT_DEFAULT = 64;
    public static final int MAX_IN_FLIGHT_LIMIT = 4096;
    public static final long REQUEST_TIMEOUT_MILLIS_DEFAULT = 10_000;
    public static final int MAX_RETRIES_DEFAULT = 5;
    public static final long BASE_BACKOFF_MILLIS_DEFAULT = 50;
    public static final long MAX_BACKOFF_MILLIS_DEFAULT = 5_000;
    public static final long MAX_OBJECT_BYTES_DEFAULT = 256L << 20;
    public static final long FETCH_LATENCY_MILLIS_DEFAULT = 0;
    /**
     * 30 s: a local file (a few MB at most) reads in milliseconds even from a busy network file system, so a read this
     * slow is hung (an NFS server gone, a device that never ends) and waiting longer only stalls the feed.
     */
    public static final long LOCAL_READ_TIMEOUT_MILLIS_DEFAULT = 30_000;

    public SourceConfig {
        if (endpointOverride != null) {
            String authority = endpointOverride.getRawAuthority();
            if (authority != null && authority.contains("@"))
                throw new IllegalArgumentException("the endpoint must not carry credentials (user:password@host): "
                        + "give them through the default provider chain (e.g. AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)");
            String scheme = endpointOverride.getScheme();
            if (!"http".equals(scheme) && !"https".equals(scheme) || endpointOverride.getHost() == null)
                throw new IllegalArgumentException("endpoint must be an http:// or https:// URI with a host: " + endpointOverride);
        }
        if (region == null || region.isBlank()) throw new IllegalArgumentException("region must not be blank");
        if ((accessKeyId == null) != (secretAccessKey == null))
            throw new IllegalArgumentException("give both the access key id and the secret key, or neither (default provider chain)");
        if (accessKeyId != null && (accessKeyId.isBlank() || secretAccessKey.isBlank()))
            throw new IllegalArgumentException("access key id and secret key must not be blank");
        if (maxInFlight < 1 || maxInFlight > MAX_IN_FLIGHT_LIMIT)
            throw new IllegalArgumentException("maxInFlight must be in [1, " + MAX_IN_FLIGHT_LIMIT + "]: " + maxInFlight);
        if (requestTimeoutMillis < 1) throw new IllegalArgumentException("requestTimeoutMillis must be positive: " + requestTimeoutMillis);
        if (maxRetries < 0 || maxRetries > 100) throw new IllegalArgumentException("maxRetries must be in [0, 100]: " + maxRetries);
        if (baseBackoffMillis < 0) throw new IllegalArgumentException("baseBackoffMillis must be >= 0: " + baseBackoffMillis);
        if (maxBackoffMillis < baseBackoffMillis)
            throw new IllegalArgumentException("maxBackoffMillis (" + maxBackoffMillis + ") must be >= baseBackoffMillis (" + baseBackoffMillis + ")");
        if (maxObjectBytes < 1 || maxObjectBytes > Integer.MAX_VALUE - 8)
            throw new IllegalArgumentException("maxObjectBytes must be in [1, 2^31 - 9]: " + maxObjectBytes);
        if (fetchLatencyMillis < 0) throw new IllegalArgumentException("fetchLatencyMillis must be >= 0: " + fetchLatencyMillis);
        if (localReadTimeoutMillis < 1) throw new IllegalArgumentException("localReadTimeoutMillis must be positive: " + localReadTimeoutMillis);
    }

    /** Every default. */
    public static SourceConfig defaults() { return builder().build(); }

    public static Builder builder() { return new Builder(); }

    public Builder toBuilder() {
        var b = new Builder();
        b.endpointOverride = endpointOverride;
        b.region = region;
        b.pathStyle = pathStyle;
        b.accessKeyId = accessKeyId;
        b.secretAccessKey = secretAccessKey;
        b.maxInFlight = maxInFlight;
        b.requestTimeoutMillis = requestTimeoutMillis;
        b.maxRetries = maxRetries;
        b.baseBackoffMillis = baseBackoffMillis;
        b.maxBackoffMillis = maxBackoffMillis;
        b.maxObjectBytes = maxObjectBytes;
        b.fetchLatencyMillis = fetchLatencyMillis;
        b.localReadTimeoutMillis = localReadTimeoutMillis;
        b.refsOutsideRoot = refsOutsideRoot;
        return b;
    }

    /** True when static credentials were given instead of the default provider chain. */
    public boolean hasStaticCredentials() { return accessKeyId != null; }

    @Override
    public String toString() {
        return "SourceConfig[endpointOverride=" + endpointOverride + ", region=" + region + ", pathStyle=" + pathStyle
                + ", credentials=" + (hasStaticCredentials() ? "static(key id " + masked(accessKeyId) + ", secret ****)" : "default-chain")
                + ", maxInFlight=" + maxInFlight + ", requestTimeoutMillis=" + requestTimeoutMillis + ", maxRetries=" + maxRetries
                + ", baseBackoffMillis=" + baseBackoffMillis + ", maxBackoffMillis=" + maxBackoffMillis
                + ", maxObjectBytes=" + maxObjectBytes + ", fetchLatencyMillis=" + fetchLatencyMillis
                + ", localReadTimeoutMillis=" + localReadTimeoutMillis + ", refsOutsideRoot=" + refsOutsideRoot + "]";
    }

    /** {@code ****} and the last four characters (none of a key id shorter than 12). */
    private static String masked(String keyId) {
        return "****" + (keyId.length() >= 12 ? keyId.substring(keyId.length() - 4) : "");
    }

    /** Mutable builder starting from the defaults; {@link #build()} validates. */
    public static final class Builder {
        private URI endpointOverride;
        private String region = REGION_DEFAULT;
        private boolean pathStyle;
        private String accessKeyId;
        private String secretAccessKey;
        private int maxInFlight = MAX_IN_FLIGHT_DEFAULT;
        private long requestTimeoutMillis = REQUEST_TIMEOUT_MILLIS_DEFAULT;
        private int maxRetries = MAX_RETRIES_DEFAULT;
        private long baseBackoffMillis = BASE_BACKOFF_MILLIS_DEFAULT;
        private long maxBackoffMillis = MAX_BACKOFF_MILLIS_DEFAULT;
        private long maxObjectBytes = MAX_OBJECT_BYTES_DEFAULT;
        private long fetchLatencyMillis = FETCH_LATENCY_MILLIS_DEFAULT;
        private long localReadTimeoutMillis = LOCAL_READ_TIMEOUT_MILLIS_DEFAULT;
        private boolean refsOutsideRoot;

        private Builder() { }

        public Builder endpointOverride(URI endpoint) { this.endpointOverride = endpoint; return this; }

        public Builder region(String region) { this.region = region; return this; }

        public Builder pathStyle(boolean pathStyle) { this.pathStyle = pathStyle; return this; }

        /** Static credentials; both null restores the default provider chain. */
        public Builder credentials(String accessKeyId, String secretAccessKey) {
            this.accessKeyId = accessKeyId;
            this.secretAccessKey = secretAccessKey;
            return this;
        }

        public Builder maxInFlight(int maxInFlight) { this.maxInFlight = maxInFlight; return this; }

        public Builder requestTimeoutMillis(long millis) { this.requestTimeoutMillis = millis; return this; }

        public Builder maxRetries(int maxRetries) { this.maxRetries = maxRetries; return this; }

        public Builder baseBackoffMillis(long millis) { this.baseBackoffMillis = millis; return this; }

        public Builder maxBackoffMillis(long millis) { this.maxBackoffMillis = millis; return this; }

        public Builder maxObjectBytes(long bytes) { this.maxObjectBytes = bytes; return this; }

        public Builder fetchLatencyMillis(long millis) { this.fetchLatencyMillis = millis; return this; }

        public Builder localReadTimeoutMillis(long millis) { this.localReadTimeoutMillis = millis; return this; }

        public Builder refsOutsideRoot(boolean allowed) { this.refsOutsideRoot = allowed; return this; }

        public SourceConfig build() {
            return new SourceConfig(endpointOverride, region, pathStyle, accessKeyId, secretAccessKey, maxInFlight,
                    requestTimeoutMillis, maxRetries, baseBackoffMillis, maxBackoffMillis, maxObjectBytes, fetchLatencyMillis,
                    localReadTimeoutMillis, refsOutsideRoot);
        }
    }
}
