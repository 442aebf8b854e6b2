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
            Field.notNullable(DATA, ArrowType.LargeBinary.INSTANCE));

    private FlightWire() {}

    /** What a DoGet asks for. {@code job} is informational: one server serves one job. */
    record Request(int rank, int world, String job) {}

    /**
     * The batch metadata JSON: the {@code STKB} header's fields under the names the Python client
     * uses ({@code samples} is {@code Meta.batchSize}).
     */
    @JsonPropertyOrder({"epoch", "step", "global_step", "rank", "world", "samples", "scheduled"})
    record MetaJson(long epoch, long step, @JsonProperty("global_step") long globalStep, int rank, int world, int samples, int scheduled) {
        static MetaJson of(BatchLayout.Meta m) {
            return new MetaJson(m.epoch(), m.step(), m.globalStep(), m.rank(), m.world(), m.batchSize(), m.scheduled());
        }

        BatchLayout.Meta toMeta() { return new BatchLayout.Meta(epoch, step, rank, world, samples, scheduled, globalStep); }
    }

    static Schema schema(Map<String, String> metadata) { return new Schema(FIELDS, metadata); }

    static Schema batchSchema(String metaJson) { return schema(Map.of(META_BATCH, metaJson)); }

    static Schema endSchema() { return schema(Map.of(META_END, "true")); }

    static Ticket ticket(int rank, int world, String job) {
        var body = new LinkedHashMap<String, Object>();
        body.put("rank", rank);
        body.put("world", world);
        body.put("job", job == null ? "" : job);
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
        JsonNode job = node.get("job");
        return new Request(intField(node, "rank"), intField(node, "world"), job == null || job.isNull() ? "" : job.asText());
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
