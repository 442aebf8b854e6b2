package dev.stoker.source;

import dev.stoker.core.SampleException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import org.reactivestreams.Subscriber;
import org.reactivestreams.Subscription;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.AwsCredentialsProvider;
import software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.awscore.AwsRequestOverrideConfiguration;
import software.amazon.awssdk.awscore.exception.AwsServiceException;
import software.amazon.awssdk.awscore.retry.AwsRetryStrategy;
import software.amazon.awssdk.core.ResponseBytes;
import software.amazon.awssdk.core.async.AsyncResponseTransformer;
import software.amazon.awssdk.core.async.SdkPublisher;
import software.amazon.awssdk.core.checksums.ResponseChecksumValidation;
import software.amazon.awssdk.core.exception.ApiCallAttemptTimeoutException;
import software.amazon.awssdk.core.exception.ApiCallTimeoutException;
import software.amazon.awssdk.http.nio.netty.NettyNioAsyncHttpClient;
import software.amazon.awssdk.http.nio.netty.SdkEventLoopGroup;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.s3.S3AsyncClient;
import software.amazon.awssdk.services.s3.model.GetObjectRequest;
import software.amazon.awssdk.services.s3.model.GetObjectResponse;

/**
 * Reads whole S3 objects through the SDK's async client on Netty, with its own retry loop.
 *
 * <p>Retries: the SDK's are disabled so that every attempt is visible here (counted, backed off on
 * the shared timer while the fetch keeps its in-flight slot). Retried: HTTP 5xx (503 SlowDown
 * included), 429 and other throttling codes, 400 RequestTimeout, attempt timeouts and I/O errors
 * (connection refused or reset, premature close, before or in the middle of the body). Not
 * retried: 404 ("object not found"), 403 and other client errors, credential errors, objects over
 * {@link SourceConfig#maxObjectBytes()}.
 * Backoff before retry n (0-based) is uniform in [0, min(maxBackoff, baseBackoff * 2^n)] ("full
 * jitter"), which spreads a burst of throttled clients instead of synchronising them.
 *
 * <p>Timeout: each attempt gets the SDK's {@code apiCallAttemptTimeout}, which in the async client
 * runs until the response transformer has the last byte, so it also ends a body that arrives but
 * trickles (Netty's read timeout would not: bytes keep coming); S3RetryTest checks it through a
 * proxy that trickles the body. The API-call timeout, which spans all attempts, is not set: the
 * retry loop here bounds the attempts.
 *
 * <p>Connections: one Netty event loop per core (at most 4; they only move bytes), owned here so that
 * closing does not wait out Netty's default 2 s quiet period (100 ms here, not awaited). The pool holds up to maxInFlight connections, the same bound the limiter
 * puts on fetches, so a fetch never queues for a connection. Response checksums are validated only
 * when S3 requires it, to keep CRC work off the two cores that decode images.
 *
 * <p>Threading: thread-safe. SDK callbacks run on its completion executor; retries are started
 * from the context's timer thread.
 */
final class S3Reader implements AutoCloseable {
    private final FetchContext ctx;
    private final S3AsyncClient client;
    private final AwsRequestOverrideConfiguration perRequest;
    private final SdkEventLoopGroup eventLoops;

    S3Reader(FetchContext ctx) {
        this.ctx = ctx;
        SourceConfig c = ctx.config;
        Duration attemptTimeout = Duration.ofMillis(c.requestTimeoutMillis());
        this.eventLoops = SdkEventLoopGroup.builder()
                .numberOfThreads(Math.clamp(Runtime.getRuntime().availableProcessors(), 1, 4)).build();
        var http = NettyNioAsyncHttpClient.builder()
                .eventLoopGroup(eventLoops)
                .maxConcurrency(c.maxInFlight())
                .connectionTimeout(attemptTimeout)
                .connectionAcquisitionTimeout(attemptTimeout.plusSeconds(10));
        var builder = S3AsyncClient.builder()
                .httpClientBuilder(http)
                .region(Region.of(c.region()))
                .forcePathStyle(c.pathStyle())
                .credentialsProvider(credentials(c))
                .responseChecksumValidation(ResponseChecksumValidation.WHEN_REQUIRED)
                .overrideConfiguration(o -> o.retryStrategy(AwsRetryStrategy.doNotRetry()));
        if (c.endpointOverride() != null) builder.endpointOverride(c.endpointOverride());
        this.client = builder.build();
        this.perRequest = AwsRequestOverrideConfiguration.builder().apiCallAttemptTimeout(attemptTimeout).build();
    }

    private static AwsCredentialsProvider credentials(SourceConfig c) {
        if (c.hasStaticCredentials())
            return StaticCredentialsProvider.create(AwsBasicCredentials.create(c.accessKeyId(), c.secretAccessKey()));
        return DefaultCredentialsProvider.builder().build();
    }

    /** Reads {@code s3://bucket/key}, retrying as described above. */
    CompletableFuture<byte[]> get(String sampleId, String bucket, String key, SampleException.Stage stage) {
        var request = GetObjectRequest.builder().bucket(bucket).key(key).overrideConfiguration(perRequest).build();
        return ctx.submit(sampleId, stage, startNanos -> {
            var call = new Call(sampleId, stage, request, startNanos, new CompletableFuture<>());
            attempt(call, 0);
            return call.result;
        });
    }

    /**
     * {@code length} bytes of {@code s3://bucket/key} at {@code offset} (a ranged GET; a manifest's record), retried as
     * {@link #get} is; a length over the size limit is refused.
     */
    CompletableFuture<byte[]> getRange(String sampleId, String bucket, String key, long offset, int length) {
        return getRange(sampleId, bucket, key, offset, length, SampleException.Stage.MANIFEST);
    }

    /** As {@link #getRange(String, String, String, long, int)}, errors at {@code stage}. */
    CompletableFuture<byte[]> getRange(String sampleId, String bucket, String key, long offset, int length, SampleException.Stage stage) {
        if (offset < 0 || length <= 0)
            return ctx.refused(new SampleException(sampleId, stage, "bad range " + offset + "+" + length + " of s3://" + bucket + "/" + key));
        if (length > ctx.config.maxObjectBytes())
            return ctx.refused(new SampleException(sampleId, stage, "record of " + length + " bytes, over maxObjectBytes "
                    + ctx.config.maxObjectBytes()));
        var request = GetObjectRequest.builder().bucket(bucket).key(key).range("bytes=" + offset + "-" + (offset + length - 1))
                .overrideConfiguration(perRequest).build();
        return ctx.submit(sampleId, stage, startNanos -> {
            var call = new Call(sampleId, stage, request, startNanos, new CompletableFuture<>());
            attempt(call, 0);
            return call.result.thenApply(b -> {
                if (b.length != length)
                    throw new SampleException(sampleId, stage, "s3://" + bucket + "/" + key + " gave " + b.length + " bytes for the record's "
                            + length + " at " + offset + " (the object changed since it was indexed?)");
                return b;
            });
        });
    }

    /** The object's size and ETag (HEAD), each attempt within the attempt timeout, retried as fetches are. */
    ManifestStat stat(String uri, String bucket, String key) throws IOException {
        var head = blocking(uri, "ask for", () -> client.headObject(software.amazon.awssdk.services.s3.model.HeadObjectRequest.builder()
                .bucket(bucket).key(key).overrideConfiguration(perRequest).build()));
        String etag = head.eTag() == null || head.eTag().isEmpty() ? "size-" + head.contentLength() : head.eTag();
        return new ManifestStat(head.contentLength(), etag);
    }

    /**
     * The object's bytes as a blocking stream (one GET, its start retried as fetches are; reading it blocks the caller,
     * never an SDK thread). No attempt timeout: a large manifest takes long to read.
     */
    java.io.InputStream stream(String uri, String bucket, String key) throws IOException {
        var request = GetObjectRequest.builder().bucket(bucket).key(key).build();
        return blocking(uri, "read", () -> client.getObject(request, AsyncResponseTransformer.toBlockingInputStream()));
    }

    /**
     * The keys directly under {@code prefix} up to the next {@code /} (ListObjectsV2 with the delimiter {@code /}, page by
     * page, each page retried as fetches are), in S3's order (by key); more than {@link ObjectSource#MAX_LISTED} is refused.
     */
    java.util.List<String> list(String bucket, String prefix) throws IOException {
        String uri = "s3://" + bucket + "/" + prefix;
        var keys = new java.util.ArrayList<String>();
        String token = null;
        do {
            var b = software.amazon.awssdk.services.s3.model.ListObjectsV2Request.builder().bucket(bucket).prefix(prefix).delimiter("/")
                    .overrideConfiguration(perRequest);
            if (token != null) b.continuationToken(token);
            var request = b.build();
            var page = blocking(uri, "list", () -> client.listObjectsV2(request));
            for (var o : page.contents()) keys.add(o.key());
            if (keys.size() > ObjectSource.MAX_LISTED)
                throw new IOException("more than " + ObjectSource.MAX_LISTED + " objects under " + uri + "; name fewer with a narrower pattern");
            token = Boolean.TRUE.equals(page.isTruncated()) ? page.nextContinuationToken() : null;
        } while (token != null);
        return keys;
    }

    /** Waits for {@code call}, retrying what {@link #retryable} says with the same backoff as fetches. */
    private <T> T blocking(String uri, String what, java.util.function.Supplier<CompletableFuture<T>> call) throws IOException {
        for (int attempt = 0; ; attempt++) {
            Throwable cause;
            try {
                return call.get().get(ctx.config.requestTimeoutMillis() + 5000, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted while trying to " + what + " " + uri, e);
            } catch (java.util.concurrent.ExecutionException | TimeoutException | RuntimeException e) {
                cause = FetchContext.unwrap(e);
            }
            if (cause instanceof AwsServiceException a && a.statusCode() == 404) throw new IOException("object not found: " + uri, a);
            if (attempt >= ctx.config.maxRetries() || !retryable(cause))
                throw new IOException("cannot " + what + " " + uri + (attempt > 0 ? " after " + attempt + " retries" : "") + ": " + describe(cause), cause);
            ctx.metrics.onRetry();
            try {
                Thread.sleep(backoffMillis(attempt));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted while trying to " + what + " " + uri, e);
            }
        }
    }

    private record Call(String sampleId, SampleException.Stage stage, GetObjectRequest request, long startNanos,
                        CompletableFuture<byte[]> result, AtomicBoolean firstByteSeen) {
        Call(String sampleId, SampleException.Stage stage, GetObjectRequest request, long startNanos, CompletableFuture<byte[]> result) {
            this(sampleId, stage, request, startNanos, result, new AtomicBoolean());
        }

        String uri() { return "s3://" + request.bucket() + "/" + request.key(); }
    }

    private void attempt(Call call, int attempt) {
        CompletableFuture<ResponseBytes<GetObjectResponse>> f;
        try {
            f = client.getObject(call.request, new BoundedBytes(call));
        } catch (RuntimeException e) {
            f = CompletableFuture.failedFuture(e);
        }
        f.whenComplete((bytes, error) -> {
            if (error == null) {
                call.result.complete(bytes.asByteArrayUnsafe());
                return;
            }
            Throwable cause = FetchContext.unwrap(error);
            if (attempt < ctx.config.maxRetries() && retryable(cause)) {
                ctx.metrics.onRetry();
                try {
                    ctx.timer.schedule(() -> attempt(call, attempt + 1), backoffMillis(attempt), TimeUnit.MILLISECONDS);
                } catch (RejectedExecutionException closed) {
                    call.result.completeExceptionally(failure(call, cause, attempt));
                }
            } else {
                call.result.completeExceptionally(failure(call, cause, attempt));
            }
        });
    }

    private long backoffMillis(int attempt) {
        long base = ctx.config.baseBackoffMillis();
        long factor = attempt >= 62 ? Long.MAX_VALUE : 1L << attempt;
        long scaled = base > Long.MAX_VALUE / factor ? Long.MAX_VALUE : base * factor;
        long cap = Math.min(ctx.config.maxBackoffMillis(), scaled);
        return cap == 0 ? 0 : ThreadLocalRandom.current().nextLong(cap + 1);
    }

    /** The SampleException in {@code t}'s causes (one this reader raised, which the SDK may wrap), else null. */
    private static SampleException ownRefusal(Throwable t) {
        for (Throwable c = t; c != null; c = c.getCause()) if (c instanceof SampleException se) return se;
        return null;
    }

    static boolean retryable(Throwable t) {
        if (ownRefusal(t) != null) return false;
        if (t instanceof AwsServiceException e) {
            int status = e.statusCode();
            if (status >= 500 || status == 429 || e.isThrottlingException()) return true;
            return e.awsErrorDetails() != null && "RequestTimeout".equals(e.awsErrorDetails().errorCode());
        }
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (c instanceof IOException || c instanceof UncheckedIOException || c instanceof TimeoutException
                    || c instanceof ApiCallAttemptTimeoutException || c instanceof ApiCallTimeoutException)
                return true;
        }
        return false;
    }

    private static SampleException failure(Call call, Throwable cause, int retries) {
        SampleException own = ownRefusal(cause);
        if (own != null) return own;
        if (cause instanceof AwsServiceException e && e.statusCode() == 404)
            return new SampleException(call.sampleId, call.stage, "object not found: " + call.uri() + " (" + describe(e) + ")", e);
        if (cause instanceof AwsServiceException e && e.statusCode() == 403)
            return new SampleException(call.sampleId, call.stage, "access denied: " + call.uri() + " (" + describe(e) + ")", e);
        String after = retryable(cause) ? " after " + retries + (retries == 1 ? " retry" : " retries") : "";
        return new SampleException(call.sampleId, call.stage, "cannot fetch " + call.uri() + after + ": " + describe(cause), cause);
    }

    private static String describe(Throwable t) {
        if (t instanceof AwsServiceException e) {
            var details = e.awsErrorDetails();
            String code = details == null ? null : details.errorCode();
            return "HTTP " + e.statusCode() + (code == null ? "" : " " + code);
        }
        String msg = t.getMessage();
        return t.getClass().getSimpleName() + (msg == null ? "" : ": " + msg);
    }

    @Override
    public void close() {
        client.close();
        eventLoops.eventLoopGroup().shutdownGracefully(100, 2000, TimeUnit.MILLISECONDS);
    }

    /**
     * Buffers the body, notes the first byte and bounds it by {@link SourceConfig#maxObjectBytes()}: an object whose
     * Content-Length is over the limit is refused before a byte of it is read, and a body without one (chunked transfer
     * encoding; audit #26) or longer than it said is counted as it arrives and refused, its stream cancelled, as soon as
     * it passes the limit, so that no more than the limit is ever held for it.
     */
    private final class BoundedBytes implements AsyncResponseTransformer<GetObjectResponse, ResponseBytes<GetObjectResponse>> {
        private final Call call;
        private volatile CompletableFuture<ResponseBytes<GetObjectResponse>> future;
        private volatile GetObjectResponse response;
        private volatile SampleException tooLarge;

        BoundedBytes(Call call) { this.call = call; }

        @Override
        public CompletableFuture<ResponseBytes<GetObjectResponse>> prepare() {
            future = new CompletableFuture<>();
            return future;
        }

        @Override
        public void onResponse(GetObjectResponse response) {
            if (call.firstByteSeen.compareAndSet(false, true)) ctx.metrics.onFirstByte(System.nanoTime() - call.startNanos);
            this.response = response;
            Long length = response.contentLength();
            if (length != null && length > ctx.config.maxObjectBytes())
                tooLarge = new SampleException(call.sampleId, call.stage,
                        call.uri() + " has " + length + " bytes, over maxObjectBytes " + ctx.config.maxObjectBytes());
        }

        @Override
        public void onStream(SdkPublisher<ByteBuffer> publisher) {
            SampleException refused = tooLarge;
            Long declared = response == null ? null : response.contentLength();
            long limit = ctx.config.maxObjectBytes();
            var target = future;
            publisher.subscribe(new Subscriber<ByteBuffer>() {
                private Subscription subscription;
                private byte[] bytes = new byte[(int) Math.min(limit, declared != null && declared >= 0 ? declared : 64 << 10)];
                private int size;
                private boolean done;

                @Override
                public void onSubscribe(Subscription s) {
                    subscription = s;
                    if (refused != null) {
                        done = true;
                        s.cancel();
                        target.completeExceptionally(refused);
                        return;
                    }
                    s.request(Long.MAX_VALUE);
                }

                @Override
                public void onNext(ByteBuffer b) {
                    if (done) return;
                    int n = b.remaining();
                    if ((long) size + n > limit) {
                        done = true;
                        subscription.cancel();
                        bytes = null;
                        target.completeExceptionally(new SampleException(call.sampleId, call.stage, call.uri() + " has more than " + limit
                                + " bytes, over maxObjectBytes " + limit + " (" + (declared == null ? "no Content-Length: the body was read up to the "
                                + "limit and dropped" : "Content-Length " + declared + " was short") + ")"));
                        return;
                    }
                    if (size + n > bytes.length)
                        bytes = Arrays.copyOf(bytes, (int) Math.min(limit, Math.max((long) size + n, 2L * bytes.length)));
                    b.get(bytes, size, n);
                    size += n;
                }

                @Override
                public void onError(Throwable t) {
                    if (done) return;
                    done = true;
                    bytes = null;
                    target.completeExceptionally(t);
                }

                @Override
                public void onComplete() {
                    if (done) return;
                    done = true;
                    byte[] body = size == bytes.length ? bytes : Arrays.copyOf(bytes, size);
                    bytes = null;
                    target.complete(ResponseBytes.fromByteArrayUnsafe(response, body));
                }
            });
        }

        @Override
        public void exceptionOccurred(Throwable error) {
            var f = future;
            if (f != null) f.completeExceptionally(error);
        }
    }
}
