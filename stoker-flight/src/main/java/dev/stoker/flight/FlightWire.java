package dev.stoker.flight;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.annotation.JsonPropertyOrder;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import dev.stoker.core.batch.BatchLayout;
import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.flight.Ticket;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * The Flight wire format shared by {@link FlightBatchServer} and {@link FlightBatchClient}
 * (docs/protocol.md, section 3): the ticket, the schema (one row per tensor) and the batch
 * metadata JSON.
 */
final class FlightWire {
    static final String NAME = "name", DTYPE = "dtype", SHAPE = "shape", DATA = "data";
    /**
     * Column: the row is the batch's metadata ({@code sample_index}, {@code pixel_norm}, {@code pixel_patch}; the empty vision
     * inputs of a batch without images), not a model input — the {@code STKB} descriptor's flag. Added with layout version 2; a stream without it is of version 1.
     */
    static final String METADATA = "metadata";
    /** Schema metadata key of a stream that carries a batch: the batch metadata JSON. */
    static final String META_BATCH = "stoker.batch";
    /** Schema metadata key of a stream that carries no batch because the rank's feed has ended. */
    static final String META_END = "stoker.end";

    /** Unknown fields are ignored, so that either side may add some. */
    static final ObjectMapper JSON = JsonMapper.builder().disable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES).build();

    private static final List<Field> FIELDS = List.of(
            Field.notNullable(NAME, ArrowType.Utf8.INSTANCE),
            Field.notNullable(DTYPE, ArrowType.Utf8.INSTANCE),
            new Field(SHAPE, FieldType.notNullable(ArrowType.List.INSTANCE),
                    List.of(Field.notNullable("item", new ArrowType.Int(64, true)))),
            Field.notNullable(DATA, ArrowType.LargeBinary.INSTANCE),
            Field.notNullable(METADATA, ArrowType.Bool.INSTANCE));

    private FlightWire() {}

    /**
     * What a DoGet asks for. {@code job} is informational: one server serves one job. {@code session}
     * names the client's session (empty: none, the batch is at most once): one opened by the
     * {@link #ACTION_JOIN} action, whose ledger record makes its batches exactly once.
     */
    record Request(int rank, int world, String job, String session) {
        Request(int rank, int world, String job) { this(rank, world, job, ""); }
    }

    /** Action: a session says hello (body: {@link Join} JSON); the result is the {@code Joined} JSON. */
    static final String ACTION_JOIN = "stoker.join";
    /** Action: a session ends (body: the session id); its rank may then be claimed by another. */
    static final String ACTION_LEAVE = "stoker.leave";
    /** Longest session id. */
    static final int MAX_SESSION_CHARS = 128;

    /** A session's hello: like the socket's HELLO, with the cursor and fingerprint of a saved state (resume) or none. */
    record Join(String session, int rank, int world, Long epoch, Long position, @JsonProperty("next_step") Long nextStep, long fingerprint) {
        Join {
            if (session == null || session.isEmpty() || session.length() > MAX_SESSION_CHARS)
                throw new IllegalArgumentException("a session id of 1 to " + MAX_SESSION_CHARS + " characters is needed");
            if ((epoch == null) != (position == null)) throw new IllegalArgumentException("resume needs both epoch and position");
            if (nextStep != null && (epoch == null || nextStep < 0))
                throw new IllegalArgumentException("next_step needs a resume cursor and must be >= 0");
        }
    }

    /** What a session is told: as the socket's WELCOME. */
    record Joined(@JsonProperty("next_step") long nextStep, long fingerprint, @JsonProperty("steps_per_epoch") long stepsPerEpoch,
                  long epoch, long position, @JsonProperty("dataset_size") long datasetSize,
                  @JsonProperty("positions_per_step") long positionsPerStep) {}

    static byte[] json(Object value) {
        try {
            return JSON.writeValueAsBytes(value);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    static <T> T read(byte[] bytes, Class<T> type, String what) {
        try {
            return JSON.readValue(bytes, type);
        } catch (IOException e) {
            throw new IllegalArgumentException("unreadable " + what + ": " + e.getMessage());
        }
    }

    /**
     * The batch metadata JSON: the {@code STKB} header's fields under the names the Python client
     * uses ({@code samples} is {@code Meta.batchSize}).
     */
    @JsonPropertyOrder({"epoch", "step", "global_step", "rank", "world", "samples", "scheduled", "resume"})
    record MetaJson(long epoch, long step, @JsonProperty("global_step") long globalStep, int rank, int world, int samples, int scheduled,
                    @com.fasterxml.jackson.annotation.JsonInclude(com.fasterxml.jackson.annotation.JsonInclude.Include.NON_NULL)
                    ResumeJson resume) {
        static MetaJson of(BatchLayout.Meta m) {
            return new MetaJson(m.epoch(), m.step(), m.globalStep(), m.rank(), m.world(), m.batchSize(), m.scheduled(), ResumeJson.of(m.resume()));
        }

        BatchLayout.Meta toMeta() {
            return new BatchLayout.Meta(epoch, step, rank, world, samples, scheduled, globalStep, resume == null ? null : resume.toResume());
        }
    }

    /** The batch's resume block ({@link BatchLayout.Resume}): the next step's cursor and label, each source's cursor as [epoch, position]. */
    record ResumeJson(long epoch, long position, @JsonProperty("next_step") long nextStep, long[][] sources) {
        static ResumeJson of(BatchLayout.Resume r) {
            if (r == null) return null;
            var sources = new long[r.sources()][];
            var e = r.sourceEpochs();
            var p = r.sourcePositions();
            for (int i = 0; i < sources.length; i++) sources[i] = new long[] {e[i], p[i]};
            return new ResumeJson(r.epoch(), r.position(), r.step(), sources);
        }

        BatchLayout.Resume toResume() {
            int n = sources == null ? 0 : sources.length;
            if (n > BatchLayout.MAX_RESUME_SOURCES) throw new IllegalArgumentException("batch metadata names " + n + " sources");
            var e = new long[n];
            var p = new long[n];
            for (int i = 0; i < n; i++) {
                if (sources[i] == null || sources[i].length != 2) throw new IllegalArgumentException("a source cursor is [epoch, position]");
                e[i] = sources[i][0];
                p[i] = sources[i][1];
            }
            return new BatchLayout.Resume(epoch, position, nextStep, e, p);
        }
    }

    static Schema schema(Map<String, String> metadata) { return new Schema(FIELDS, metadata); }

    static Schema batchSchema(String metaJson) { return schema(Map.of(META_BATCH, metaJson)); }

    static Schema endSchema() { return schema(Map.of(META_END, "true")); }

    static Ticket ticket(int rank, int world, String job) { return ticket(rank, world, job, ""); }

    static Ticket ticket(int rank, int world, String job, String session) {
        var body = new LinkedHashMap<String, Object>();
        body.put("rank", rank);
        body.put("world", world);
        body.put("job", job == null ? "" : job);
        if (!session.isEmpty()) body.put("session", session);
        try {
            return new Ticket(JSON.writeValueAsBytes(body));
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Parses a ticket; IllegalArgumentException says what is wrong with it. */
    static Request parseTicket(byte[] bytes) {
        JsonNode node;
        try {
            node = JSON.readTree(bytes);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("ticket is not JSON {\"rank\":R,\"world\":W,\"job\":\"...\"}: " + e.getOriginalMessage());
        } catch (IOException e) {
            throw new IllegalArgumentException("unreadable ticket: " + e.getMessage());
        }
        if (node == null || !node.isObject()) throw new IllegalArgumentException("ticket is not a JSON object {\"rank\":R,\"world\":W,\"job\":\"...\"}");
        JsonNode job = node.get("job"), session = node.get("session");
        String sessionId = session == null || session.isNull() ? "" : session.asText();
        if (sessionId.length() > MAX_SESSION_CHARS) throw new IllegalArgumentException("session id longer than " + MAX_SESSION_CHARS);
        return new Request(intField(node, "rank"), intField(node, "world"), job == null || job.isNull() ? "" : job.asText(), sessionId);
    }

    private static int intField(JsonNode node, String name) {
        JsonNode v = node.get(name);
        if (v == null || !v.isIntegralNumber() || !v.canConvertToInt()) throw new IllegalArgumentException("ticket needs an integer \"" + name + "\"");
        return v.intValue();
    }

    static String json(BatchLayout.Meta meta) {
        try {
            return JSON.writeValueAsString(MetaJson.of(meta));
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    static BatchLayout.Meta parseMeta(String json) {
        try {
            return JSON.readValue(json, MetaJson.class).toMeta();
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("bad batch metadata " + json + ": " + e.getOriginalMessage());
        }
    }
}
