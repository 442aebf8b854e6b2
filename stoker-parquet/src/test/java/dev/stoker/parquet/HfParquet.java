package dev.stoker.parquet;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.apache.parquet.conf.PlainParquetConfiguration;
import org.apache.parquet.example.data.Group;
import org.apache.parquet.example.data.simple.SimpleGroupFactory;
import org.apache.parquet.hadoop.example.ExampleParquetWriter;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.parquet.io.LocalOutputFile;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.schema.GroupType;
import org.apache.parquet.schema.LogicalTypeAnnotation;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.MessageTypeParser;
import org.apache.parquet.schema.Type;

/**
 * Writes Parquet files in the Hugging Face datasets layout with parquet-java (no Hadoop: the codecs are
 * {@link ParquetCodecs}), from rows given as JSON-like values: a {@code Map} is a struct, a {@code List} a LIST
 * (three levels, {@code list}/{@code element}, as pyarrow writes), a {@code String}, {@code byte[]} or number a
 * value, null (or a missing key) a null.
 */
public final class HfParquet {
    private HfParquet() { }

    private static final String IMAGE_STRUCT = "optional group element { optional binary bytes; optional binary path (STRING); }";

    /** messages: list<struct<content: list<struct<index, text, type>>, role>>, images: list<struct<bytes, path>>, plus an ignored column. */
    public static final MessageType TYPED = MessageTypeParser.parseMessageType("message schema {"
            + " optional binary id (STRING);"
            + " optional group messages (LIST) { repeated group list { optional group element {"
            + "   optional group content (LIST) { repeated group list { optional group element {"
            + "     optional int64 index; optional binary text (STRING); optional binary type (STRING); } } }"
            + "   optional binary role (STRING); } } }"
            + " optional group images (LIST) { repeated group list { " + IMAGE_STRUCT + " } }"
            + " optional binary source (STRING);"
            + "}");

    /** messages: list<struct<role, content: string>>, images: list<struct<bytes, path>>. */
    public static final MessageType STRING_MESSAGES = MessageTypeParser.parseMessageType("message schema {"
            + " optional binary id (STRING);"
            + " optional group messages (LIST) { repeated group list { optional group element {"
            + "   optional binary role (STRING); optional binary content (STRING); } } }"
            + " optional group images (LIST) { repeated group list { " + IMAGE_STRUCT + " } }"
            + "}");

    /** conversations: list<struct<from, value>>, images: list<struct<bytes, path>>, id an int64. */
    public static final MessageType CONVERSATIONS_IMAGES = MessageTypeParser.parseMessageType("message schema {"
            + " optional binary id (STRING);"
            + " optional group conversations (LIST) { repeated group list { optional group element {"
            + "   optional binary from (STRING); optional binary value (STRING); } } }"
            + " optional group images (LIST) { repeated group list { " + IMAGE_STRUCT + " } }"
            + "}");

    /** conversations: list<struct<from, value>>, image: struct<bytes, path>, id an int64. */
    public static final MessageType CONVERSATIONS_IMAGE = MessageTypeParser.parseMessageType("message schema {"
            + " optional int64 id;"
            + " optional group conversations (LIST) { repeated group list { optional group element {"
            + "   optional binary from (STRING); optional binary value (STRING); } } }"
            + " optional group image { optional binary bytes; optional binary path (STRING); }"
            + "}");

    /** messages: list<struct<role, content: string>>, images and videos: list<struct<bytes, path>> (the datasets Image and Video features). */
    public static final MessageType STRING_MESSAGES_VIDEOS = MessageTypeParser.parseMessageType("message schema {"
            + " optional binary id (STRING);"
            + " optional group messages (LIST) { repeated group list { optional group element {"
            + "   optional binary role (STRING); optional binary content (STRING); } } }"
            + " optional group images (LIST) { repeated group list { " + IMAGE_STRUCT + " } }"
            + " optional group videos (LIST) { repeated group list { " + IMAGE_STRUCT + " } }"
            + "}");

    /** messages: list<struct<content: list<struct<text, type, fps>>, role>>, video: one struct<bytes, path>. */
    public static final MessageType TYPED_VIDEO = MessageTypeParser.parseMessageType("message schema {"
            + " optional binary id (STRING);"
            + " optional group messages (LIST) { repeated group list { optional group element {"
            + "   optional group content (LIST) { repeated group list { optional group element {"
            + "     optional binary text (STRING); optional binary type (STRING); optional double fps; } } }"
            + "   optional binary role (STRING); } } }"
            + " optional group video { optional binary bytes; optional binary path (STRING); }"
            + "}");

    /** Writes {@code rows} to {@code file}, {@code rowsPerGroup} rows to a row group. */
    public static Path write(Path file, MessageType schema, List<Map<String, Object>> rows, int rowsPerGroup, CompressionCodecName codec) throws IOException {
        Files.deleteIfExists(file);
        var factory = new SimpleGroupFactory(schema);
        try (var w = ExampleParquetWriter.builder(new LocalOutputFile(file)).withConf(new PlainParquetConfiguration())
                .withCodecFactory(ParquetCodecs.INSTANCE).withCompressionCodec(codec).withType(schema)
                .withRowGroupRowCountLimit(rowsPerGroup).withDictionaryEncoding(false).build()) {
            for (var row : rows) {
                Group g = factory.newGroup();
                fill(g, schema, row);
                w.write(g);
            }
        }
        return file;
    }

    public static Path write(Path file, MessageType schema, List<Map<String, Object>> rows, int rowsPerGroup) throws IOException {
        return write(file, schema, rows, rowsPerGroup, CompressionCodecName.SNAPPY);
    }

    private static void fill(Group g, GroupType type, Map<String, Object> values) {
        for (var e : values.entrySet()) {
            if (!type.containsField(e.getKey())) throw new IllegalArgumentException("no column " + e.getKey() + " in " + type);
            if (e.getValue() != null) put(g, type.getType(e.getKey()), e.getKey(), e.getValue());
        }
    }

    @SuppressWarnings("unchecked")
    private static void put(Group g, Type t, String name, Object v) {
        if (t.isPrimitive()) {
            switch (v) {
                case String s -> g.append(name, s);
                case byte[] b -> g.append(name, Binary.fromConstantByteArray(b));
                case Long l -> g.append(name, l);
                case Double d -> g.append(name, d);
                case Integer i -> {
                    if (t.asPrimitiveType().getPrimitiveTypeName() == org.apache.parquet.schema.PrimitiveType.PrimitiveTypeName.INT64) g.append(name, (long) i);
                    else g.append(name, i);
                }
                default -> throw new IllegalArgumentException("cannot write " + v.getClass() + " to " + t);
            }
            return;
        }
        Group child = g.addGroup(name);
        if (t.getLogicalTypeAnnotation() instanceof LogicalTypeAnnotation.ListLogicalTypeAnnotation) {
            var element = t.asGroupType().getType(0).asGroupType().getType(0);
            for (Object item : (List<Object>) v) {
                Group wrapper = child.addGroup("list");
                if (item != null) put(wrapper, element, element.getName(), item);
            }
        } else {
            fill(child, t.asGroupType(), (Map<String, Object>) v);
        }
    }

    /** A Map that keeps nulls (Map.of refuses them), in order. */
    public static Map<String, Object> map(Object... kv) {
        var m = new java.util.LinkedHashMap<String, Object>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    /** A List that keeps nulls. */
    public static List<Object> list(Object... items) { return java.util.Arrays.asList(items); }

    /** A struct<bytes, path>. */
    public static Map<String, Object> image(byte[] bytes, String path) { return map("bytes", bytes, "path", path); }
}
