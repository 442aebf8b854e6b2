package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.text.Message.Image;
import dev.stoker.text.Message.Role;
import dev.stoker.text.Message.Text;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

@Timeout(60)
class SampleParserTest {
    private final SampleParser parser = new SampleParser();

    private ChatSample parse(String json) {
        return parser.parseLine(json.getBytes(StandardCharsets.UTF_8), "train.jsonl:17");
    }

    private SampleException fails(String json) {
        var e = assertThrows(SampleException.class, () -> parse(json));
        assertEquals(SampleException.Stage.MANIFEST, e.stage());
        return e;
    }

    @Test
    void llavaConversionFollowsBuildMessages() {
        var s = parse("""
            {"image": ["a.jpg", "b.png"], "conversations": [
              {"from": "system", "value": " Be terse. "},
              {"from": "human", "value": "  <image>\\n first \\n<image>  second  "},
              {"from": "gpt", "value": "  verbatim <image> answer\\n"},
              {"from": "human", "value": "<image>"}]}""".replace("<image>\"}]}", "more\"}]}"));
        assertEquals("train.jsonl:17", s.id());
        assertEquals(List.of("a.jpg", "b.png"), s.imagePaths());
        assertEquals(List.of(
                Message.text(Role.SYSTEM, " Be terse. "),
                new Message(Role.USER, List.of(new Image("a.jpg"), new Text("first"), new Image("b.png"), new Text("second"))),
                Message.text(Role.ASSISTANT, "  verbatim <image> answer\n"),
                Message.text(Role.USER, "more")), s.messages());
    }

    @Test
    void llavaWithoutImagesAndWithNumericIdAndUserAlias() {
        var s = parse("{\"id\": 42, \"conversations\": [{\"from\": \"user\", \"value\": \"hi\"}, {\"from\": \"bot\", \"value\": \"yo\"}]}");
        assertEquals("42", s.id());
        assertEquals(List.of(), s.imagePaths());
        assertEquals(List.of(Message.text(Role.USER, "hi"), Message.text(Role.ASSISTANT, "yo")), s.messages());
        var one = parse("{\"image\": \"x.jpg\", \"conversations\": [{\"from\": \"human\", \"value\": \"<image>\"}]}");
        assertEquals(List.of("x.jpg"), one.imagePaths());
        assertEquals(List.of(new Message(Role.USER, List.of(new Image("x.jpg")))), one.messages());
    }

    @Test
    void msSwiftMessagesReplaceEachPlaceholderInPlaceAndKeepTheText() {
        var s = parse("""
            {"messages": [{"role": "user", "content": "<image>What is this?"}, {"role": "assistant", "content": "A cat."}],
             "images": ["a.jpg"]}""");
        assertEquals(List.of("a.jpg"), s.imagePaths());
        assertEquals(List.of(
                new Message(Role.USER, List.of(new Image("a.jpg"), new Text("What is this?"))),
                Message.text(Role.ASSISTANT, "A cat.")), s.messages());

        var verbatim = parse("""
            {"messages": [{"role": "system", "content": " Be terse. "},
                          {"role": "user", "content": "<image>\\nWhat  <image> and\\n"},
                          {"role": "assistant", "content": " Two cats.\\n"}],
             "images": ["a.jpg", "b.jpg"]}""");
        assertEquals(List.of(
                Message.text(Role.SYSTEM, " Be terse. "),
                new Message(Role.USER, List.of(new Image("a.jpg"), new Text("\nWhat  "), new Image("b.jpg"), new Text(" and\n"))),
                Message.text(Role.ASSISTANT, " Two cats.\n")), verbatim.messages());
    }

    @Test
    void sharegptConversationsWithImagesFollowTheLlamaFactoryRule() {
        var s = parse("""
            {"conversations": [{"from": "system", "value": "S"},
                               {"from": "human", "value": " look: <image>\\n"},
                               {"from": "gpt", "value": "ok"},
                               {"from": "user", "value": "and <image>"},
                               {"from": "assistant", "value": "<image> too"}],
             "images": ["a.jpg", "b.jpg", "c.jpg"]}""");
        assertEquals(List.of("a.jpg", "b.jpg", "c.jpg"), s.imagePaths());
        assertEquals(List.of(
                Message.text(Role.SYSTEM, "S"),
                new Message(Role.USER, List.of(new Text(" look: "), new Image("a.jpg"), new Text("\n"))),
                Message.text(Role.ASSISTANT, "ok"),
                new Message(Role.USER, List.of(new Text("and "), new Image("b.jpg"))),
                new Message(Role.ASSISTANT, List.of(new Image("c.jpg"), new Text(" too")))), s.messages());
    }

    @Test
    void conversationsWithImageStillStripLikeLlava() {
        var llava = parse("{\"image\": [\"a.jpg\"], \"conversations\": [{\"from\": \"human\", \"value\": \"<image>\\n What? \"}]}");
        assertEquals(List.of(new Message(Role.USER, List.of(new Image("a.jpg"), new Text("What?")))), llava.messages());
        var sharegpt = parse("{\"images\": [\"a.jpg\"], \"conversations\": [{\"from\": \"human\", \"value\": \"<image>\\n What? \"}]}");
        assertEquals(List.of(new Message(Role.USER, List.of(new Image("a.jpg"), new Text("\n What? ")))), sharegpt.messages());
        var textOnly = parse("{\"conversations\": [{\"from\": \"human\", \"value\": \" hi \"}, {\"from\": \"bot\", \"value\": \" yo \"}]}");
        assertEquals(List.of(Message.text(Role.USER, "hi"), Message.text(Role.ASSISTANT, " yo ")), textOnly.messages());
    }

    @Test
    void sharegptAndTypedMessagesGiveTheSameSample() {
        var sharegpt = parse("""
            {"id": "q", "conversations": [{"from": "system", "value": "Be brief."},
                                          {"from": "human", "value": "<image>Compare with <image> please."},
                                          {"from": "gpt", "value": "The first is larger."}],
             "images": ["a.jpg", "b.jpg"]}""");
        var swift = parse("""
            {"id": "q", "messages": [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": "<image>Compare with <image> please."},
                                     {"role": "assistant", "content": "The first is larger."}],
             "images": ["a.jpg", "b.jpg"]}""");
        var typed = parse("""
            {"id": "q", "messages": [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": [{"type": "image", "image": "a.jpg"},
                                                                  {"type": "text", "text": "Compare with "},
                                                                  {"type": "image", "image": "b.jpg"},
                                                                  {"type": "text", "text": " please."}]},
                                     {"role": "assistant", "content": "The first is larger."}]}""");
        assertEquals(typed, sharegpt);
        assertEquals(typed, swift);
        for (var family : dev.stoker.core.ProcessorPreset.ChatFamily.values()) {
            var template = new ChatTemplate(family);
            assertEquals(template.render(typed.messages()), template.render(sharegpt.messages()));
            assertEquals(template.render(typed.messages()), template.render(swift.messages()));
        }
    }

    @ParameterizedTest
    @CsvSource(delimiter = '|', textBlock = """
        {"messages": [{"role": "user", "content": "<image><image> two?"}], "images": ["a.jpg"]}                     | the messages have 2 <image> placeholder(s) but the record lists 1 image(s)
        {"messages": [{"role": "user", "content": "<image> one"}], "images": ["a.jpg", "b.jpg"]}                    | the messages have 1 <image> placeholder(s) but the record lists 2 image(s)
        {"messages": [{"role": "user", "content": "no tag"}, {"role": "assistant", "content": "x"}], "images": ["a"]} | the messages have 0 <image> placeholder(s) but the record lists 1 image(s)
        {"messages": [{"role": "user", "content": "<image> what?"}]}                                               | the messages have 1 <image> placeholder(s) but the record lists 0 image(s)
        {"conversations": [{"from": "human", "value": "<image><image>"}], "images": ["a.jpg"]}                     | the turns have 2 <image> placeholder(s) but the record lists 1 image(s)
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "x"}], "images": ["a.jpg"]}  | the turns have 0 <image> placeholder(s) but the record lists 1 image(s)
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "images": ["a.jpg"]}         | field 'images' lists 1 image(s) but the record uses none
        {"messages": [{"role": "user", "content": [{"type": "image", "image": "a.jpg"}]}], "image": "a.jpg"}      | field 'image' lists 1 image(s) but the record uses its 1 typed image item(s)
        {"messages": [{"role": "user", "content": [{"type": "image", "image": "a.jpg"}]}, {"role": "assistant", "content": "<image>"}]} | messages[1].content: <image> placeholder in string content, but messages[0].content is typed
        {"messages": [{"role": "user", "content": "<image>"}], "images": "a", "image": "b"}                         | has both 'image' and 'images'
        {"messages": [{"role": "user", "content": "x"}], "images": [1]}                                            | field 'images[0]': expected a string, got number
        {"messages": [{"role": "observation", "content": "x"}]}                                                    | messages[0].role: unsupported role 'observation': tool turns are not supported
        {"messages": [{"role": "function_call", "content": "x"}]}                                                  | messages[0].role: unsupported role 'function_call': tool turns are not supported
        {"messages": [{"role": "tool", "content": "x"}], "images": []}                                             | messages[0].role: unsupported role 'tool': tool turns are not supported
        {"conversations": [{"from": "observation", "value": "x"}], "images": []}                                   | conversations[0].from: unsupported role 'observation': tool turns are not supported
        {"conversations": [{"from": "function_call", "value": "x"}], "images": []}                                 | conversations[0].from: unsupported role 'function_call': tool turns are not supported
        {"conversations": [{"from": "tool", "value": "x"}], "images": []}                                          | conversations[0].from: unsupported role 'tool': tool turns are not supported
        {"conversations": [{"from": "bot", "value": "x"}], "images": []}                                           | conversations[0].from: unsupported role 'bot'; expected human, gpt or system
        {"conversations": [{"from": "gpt", "value": "<video>"}], "images": []}                                     | conversations[0].value: <video> placeholder found; video is not supported
        {"messages": [{"role": "user", "content": "<video> what?"}], "videos": ["v.mp4"]}                          | messages[0].content: <video> placeholder found; video is not supported
        {"messages": [{"role": "user", "content": "what?"}], "videos": ["v.mp4"]}                                  | field 'videos': video is not supported
        {"conversations": [{"from": "human", "value": "what?"}], "video": "v.mp4"}                                 | field 'video': video is not supported
        {"messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "f"}]}                                  | field 'tools': tool definitions are not supported
        """)
    void refusesWhatItWouldMisread(String json, String expectedMessage) {
        var e = fails(json);
        assertTrue(e.getMessage().contains(expectedMessage), e.getMessage());
        assertEquals("train.jsonl:17", e.sampleId());
    }

    @Test
    void hfMessagesItemKinds() {
        var s = parse("""
            {"id": "s1", "messages": [
              {"role": "user", "content": [
                {"type": "image", "image": "a.jpg"}, {"type": "image", "url": "http://h/b.jpg"}, {"type": "image", "path": "c.jpg"},
                {"image_url": "d.jpg"}, {"type": "image_url", "image_url": {"url": "e.jpg"}}, {"text": "  keep spaces  "}]},
              {"role": "assistant", "content": ""}]}""");
        assertEquals("s1", s.id());
        assertEquals(List.of("a.jpg", "http://h/b.jpg", "c.jpg", "d.jpg", "e.jpg"), s.imagePaths());
        assertEquals(new Text("  keep spaces  "), s.messages().get(0).parts().get(5));
        assertEquals(Message.text(Role.ASSISTANT, ""), s.messages().get(1));
    }

    @Test
    void invalidUtf8IsReportedWithItsOffset() {
        var bytes = "{\"conversations\": []}".getBytes(StandardCharsets.UTF_8);
        bytes[5] = (byte) 0xC3;
        var e = assertThrows(SampleException.class, () -> parser.parseLine(bytes, "bad.jsonl:3"));
        assertEquals("bad.jsonl:3", e.sampleId());
        assertTrue(e.getMessage().contains("invalid UTF-8 at byte 5"), e.getMessage());
        var overlong = new byte[] {'{', '"', (byte) 0xC0, (byte) 0xAF, '"', ':', '1', '}'};
        assertTrue(assertThrows(SampleException.class, () -> parser.parseLine(overlong, "x")).getMessage().contains("invalid UTF-8"));
        var surrogate = new byte[] {'"', (byte) 0xED, (byte) 0xA0, (byte) 0x80, '"'};
        assertTrue(assertThrows(SampleException.class, () -> parser.parseLine(surrogate, "x")).getMessage().contains("invalid UTF-8"));
    }

    @Test
    void byteRangeAndBomAreAccepted() {
        var line = "xx\uFEFF{\"conversations\": [{\"from\": \"human\", \"value\": \"h\u00e9\"}]}yy".getBytes(StandardCharsets.UTF_8);
        var s = parser.parseLine(line, 2, line.length - 4, "f:1");
        assertEquals(List.of(Message.text(Role.USER, "h\u00e9")), s.messages());
    }

    @ParameterizedTest
    @CsvSource(delimiter = '|', textBlock = """
        {"conversations": [                                                         | malformed JSON
        {"conversations": []} {"x": 1}                                              | malformed JSON
        ''                                                                          | empty line
        [1, 2]                                                                      | expected a JSON object, got array
        {"text": "r9"}                                                              | missing field 'conversations' (LLaVA format) or 'messages'
        {"conversations": [], "messages": []}                                       | has both
        {"conversations": {"from": "human"}}                                        | field 'conversations': expected an array, got object
        {"conversations": []}                                                       | field 'conversations' is empty
        {"conversations": [{"value": "x"}]}                                         | conversations[0]: missing field 'from'
        {"conversations": [{"from": "human", "value": 3}]}                          | conversations[0].value: expected a string, got number
        {"conversations": ["hi"]}                                                   | conversations[0]: expected an object, got string
        {"image": 5, "conversations": [{"from": "human", "value": "x"}]}            | field 'image': expected a string or an array of strings, got number
        {"image": ["a", 1], "conversations": [{"from": "human", "value": "x"}]}     | field 'image[1]': expected a string, got number
        {"image": "a", "images": "b", "conversations": [{"from": "human", "value": "x"}]} | has both 'image' and 'images'
        {"id": [1], "conversations": []}                                            | field 'id': expected a string or integer, got array
        {"messages": [{"role": "tool", "content": "x"}]}                            | messages[0].role: unsupported role 'tool'
        {"messages": [{"role": "user"}]}                                            | messages[0]: missing field 'content'
        {"messages": [{"role": "user", "content": 7}]}                              | messages[0].content: expected a string or an array, got number
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}  | messages[0].content[0].text: expected a string, got number
        {"messages": [{"role": "user", "content": [{"type": "image"}]}]}            | messages[0].content[0]: image item has no 'image'
        {"messages": [{"role": "user", "content": [{"type": "image", "image": {}}]}]} | messages[0].content[0].image: expected a string, got object
        {"messages": [{"role": "user", "content": [{"type": "audio", "audio": "a"}]}]} | messages[0].content[0]: audio content is not supported by the Qwen-VL processors
        {"messages": [{"role": "user", "content": [{"type": "sound"}]}]}           | unsupported content item of type 'sound'; expected text or image
        {"messages": [{"role": "user", "content": [{"type": "video", "video": "v.mp4"}]}]} | messages[0].content[0]: video content is not supported
        {"messages": [{"role": 1, "content": "x"}]}                                 | messages[0].role: expected a string, got number
        {"messages": "hi"}                                                          | field 'messages': expected an array, got string
        """)
    void rejectsMalformedRecords(String json, String expectedMessage) {
        var e = fails(json);
        assertTrue(e.getMessage().contains(expectedMessage), e.getMessage());
        assertEquals("train.jsonl:17", e.sampleId());
    }

    @Test
    void malformedJsonSaysWhatAndWhereInOneShortLine() {
        var e = fails("{\"id\": \"s1\", \"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}");
        assertEquals("malformed JSON: Unexpected end-of-input: expected close marker for Array (start marker at column 31) at column 64",
                e.getMessage());
    }

    @Test
    void errorsNameTheRecordIdWhenPresent() {
        var e = fails("{\"id\": \"rec-7\", \"conversations\": [{\"from\": \"human\"}]}");
        assertEquals("rec-7", e.sampleId());
        assertTrue(e.describe().startsWith("rec-7: manifest: conversations[0]: missing field 'value'"), e.describe());
    }

    @Test
    void placeholderCountMustMatchImages() {
        var more = fails("{\"image\": \"a.jpg\", \"conversations\": [{\"from\": \"human\", \"value\": \"<image><image> two?\"}]}");
        assertTrue(more.getMessage().contains("2 <image> placeholder(s) but the record lists 1 image(s)"), more.getMessage());
        var fewer = fails("{\"image\": [\"a\", \"b\"], \"conversations\": [{\"from\": \"human\", \"value\": \"<image> one\"}]}");
        assertTrue(fewer.getMessage().contains("1 <image> placeholder(s) but the record lists 2 image(s)"), fewer.getMessage());
        var none = fails("{\"image\": \"a\", \"conversations\": [{\"from\": \"human\", \"value\": \"no tag\"}, {\"from\": \"gpt\", \"value\": \"<image>\"}]}");
        assertTrue(none.getMessage().contains("0 <image> placeholder(s) but the record lists 1 image(s)"), none.getMessage());
    }

    @Test
    void videoPlaceholderIsRejected() {
        var e = fails("{\"video\": \"v.mp4\", \"conversations\": [{\"from\": \"human\", \"value\": \"<video> what happens?\"}]}");
        assertTrue(e.getMessage().contains("conversations[0].value: <video> placeholder found; video is not supported"), e.getMessage());
    }

    // ---- records whose source carries the images (WebDataset members, Parquet image columns) ----

    private ChatSample embedded(String json, String... names) {
        return parser.parseRecord(json.getBytes(StandardCharsets.UTF_8), "shard.tar:k", List.of(names));
    }

    @Test
    void embeddedImagesTakeThePlaceholdersOfARecordWithoutAList() {
        var s = embedded("{\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\n<image>\\nSame?\"},{\"from\":\"gpt\",\"value\":\"No\"}]}",
                "k.0.jpg", "k.1.jpg");
        assertEquals(List.of("k.0.jpg", "k.1.jpg"), s.imagePaths());
        // the LLaVA rule applies: the same sample as the record listing its images under 'image'
        var listed = parser.parseLine(("{\"image\":[\"k.0.jpg\",\"k.1.jpg\"],\"conversations\":[{\"from\":\"human\",\"value\":"
                + "\"<image>\\n<image>\\nSame?\"},{\"from\":\"gpt\",\"value\":\"No\"}]}").getBytes(StandardCharsets.UTF_8), "shard.tar:k");
        assertEquals(listed.messages(), s.messages());
        var m = embedded("{\"messages\":[{\"role\":\"user\",\"content\":\"Look <image> here\"},{\"role\":\"assistant\",\"content\":\"ok\"}]}", "k.jpg");
        assertEquals(List.of(new Text("Look "), new Image("k.jpg"), new Text(" here")), m.messages().get(0).parts());
    }

    @Test
    void embeddedImagesReplaceAListOfAsManyAndAreRefusedWhenTheCountsDiffer() {
        var s = embedded("{\"image\":\"a.jpg\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\nWhat?\"},{\"from\":\"gpt\",\"value\":\"x\"}]}",
                "k.jpg");
        assertEquals(List.of("k.jpg"), s.imagePaths());
        var e = assertThrows(SampleException.class, () -> embedded(
                "{\"image\":\"a.jpg\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\nWhat?\"},{\"from\":\"gpt\",\"value\":\"x\"}]}",
                "k.0.jpg", "k.1.jpg"));
        assertTrue(e.getMessage().contains("names 1 image(s) but its source carries 2"), e.getMessage());
        var typed = embedded("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"},{\"type\":\"text\",\"text\":\"Hi\"}]},"
                + "{\"role\":\"assistant\",\"content\":\"ok\"}]}", "row#0");
        assertEquals(List.of("row#0"), typed.imagePaths());
        var fewer = assertThrows(SampleException.class, () -> embedded(
                "{\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\nWhat?\"},{\"from\":\"gpt\",\"value\":\"x\"}]}",
                "k.0.jpg", "k.1.jpg"));
        assertTrue(fewer.getMessage().contains("1 <image> placeholder(s) but the record lists 2 image(s)"), fewer.getMessage());
    }
}
