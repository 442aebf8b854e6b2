package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.core.UnservedMedia;
import dev.stoker.text.Message.Image;
import dev.stoker.text.Message.Role;
import dev.stoker.text.Message.Text;
import dev.stoker.text.Message.Video;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Video records (issue 29, Build item 2): read into {@link Video} parts, in every layout that reads images, only by a
 * parser made with {@link SampleParser.Videos#ACCEPT}; the default parser still refuses them with the
 * {@link UnservedMedia} message, so the product cannot take a video before decoding is wired.
 */
@Timeout(60)
class VideoRecordsTest {
    private final SampleParser parser = new SampleParser(SampleParser.Videos.ACCEPT);

    private ChatSample parse(String json) {
        return parser.parseLine(json.getBytes(StandardCharsets.UTF_8), "videos.jsonl:3");
    }

    private String refusal(SampleParser p, String json) {
        var e = assertThrows(SampleException.class, () -> p.parseLine(json.getBytes(StandardCharsets.UTF_8), "videos.jsonl:3"), json);
        assertEquals(SampleException.Stage.MANIFEST, e.stage());
        assertEquals("videos.jsonl:3", e.sampleId());
        return e.getMessage();
    }

    private String refusal(String json) { return refusal(parser, json); }

    private static final String LLAMA_FACTORY = """
        {"messages": [{"role": "user", "content": "<video>What moves? And here <image>?"},
                      {"role": "assistant", "content": "A disc."}, {"role": "user", "content": "Now <video>"},
                      {"role": "assistant", "content": "Nothing."}],
         "videos": ["a.mp4", ["f0.jpg", "f1.jpg"]], "images": ["i.png"]}""";

    @Test
    void theDefaultParserRefusesVideoAsBeforeAndTheOptionReadsIt() {
        var byDefault = new SampleParser();
        assertEquals(false, byDefault.acceptsVideo());
        assertEquals("messages[0].content: <video> placeholder found; " + UnservedMedia.VIDEO.notSupported(), refusal(byDefault, LLAMA_FACTORY));
        assertEquals("messages[0].content[0]: " + UnservedMedia.VIDEO.contentNotSupported(), refusal(byDefault,
                "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video\", \"video\": \"a.mp4\"}]}]}"));
        assertEquals("field 'videos': " + UnservedMedia.VIDEO.notSupported(), refusal(byDefault,
                "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"videos\": [\"a.mp4\"]}"));
        assertTrue(parser.acceptsVideo());
        assertEquals(2, parse(LLAMA_FACTORY).videos().size());
    }

    @Test
    void llamaFactoryPlaceholdersTakeTheListsInOrderAndKeepTheTextAroundThem() {
        var s = parse(LLAMA_FACTORY);
        var a = Video.of("a.mp4");
        var frames = new Video(null, List.of("f0.jpg", "f1.jpg"), Map.of());
        assertEquals(List.of(a, new Text("What moves? And here "), new Image("i.png"), new Text("?")), s.messages().get(0).parts());
        assertEquals(List.of(new Text("Now "), frames), s.messages().get(2).parts());
        assertEquals(List.of(a, new Image("i.png"), frames), s.media());
        assertEquals(List.of(a, frames), s.videos());
        assertEquals(List.of("i.png"), s.imagePaths());
        assertTrue(frames.isFrameList());
        assertNull(frames.ref());
    }

    @Test
    void hfTypedItemsKeepTheirPerItemKeysInOrderAsNumbersAndStrings() {
        var s = parse("""
            {"id": "clip-7", "messages": [{"role": "user", "content": [
              {"type": "video", "video": "file:///data/a.mp4", "video_start": 0.5, "nframes": 6, "fps": 2.0, "note": "x"},
              {"type": "text", "text": "Describe."},
              {"type": "video", "video": ["f0.jpg", "f1.jpg", "f2.jpg"]},
              {"type": "video", "path": "b.webm"}]},
              {"role": "assistant", "content": [{"type": "text", "text": "A road."}]}]}""");
        assertEquals("clip-7", s.id());
        var v = s.videos();
        var options = new LinkedHashMap<String, Object>();
        options.put("video_start", 0.5);
        options.put("nframes", 6L);
        options.put("fps", 2.0);
        options.put("note", "x");
        assertEquals(new Video("file:///data/a.mp4", List.of(), options), v.get(0));
        assertEquals(List.of("video_start", "nframes", "fps", "note"), new ArrayList<>(v.get(0).options().keySet()), "record order kept");
        assertEquals(Long.class, v.get(0).options().get("nframes").getClass());
        assertEquals(List.of("f0.jpg", "f1.jpg", "f2.jpg"), v.get(1).frames());
        assertEquals(Video.of("b.webm"), v.get(2));
        assertEquals("<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Describe.<|vision_start|><|video_pad|><|vision_end|>"
                + "<|vision_start|><|video_pad|><|vision_end|><|im_end|>\n<|im_start|>assistant\nA road.<|im_end|>\n",
                new ChatTemplate(dev.stoker.core.ProcessorPreset.ChatFamily.QWEN3_VL).render(s.messages()));
    }

    @Test
    void shareGptAndLlavaLayoutsReadVideoAsTheyReadImages() {
        var sharegpt = parse("""
            {"conversations": [{"from": "human", "value": "<video> what? "}, {"from": "gpt", "value": "<video> stays"}],
             "videos": ["a.mp4", "b.mp4"]}""");
        assertEquals(List.of(Video.of("a.mp4"), new Text(" what? ")), sharegpt.messages().get(0).parts());
        assertEquals(List.of(Video.of("b.mp4"), new Text(" stays")), sharegpt.messages().get(1).parts(), "ShareGPT: any turn");

        var llava = parse("""
            {"id": 12, "video": "a.mp4", "conversations": [{"from": "human", "value": "<video>\\n what? "},
             {"from": "gpt", "value": "<video> stays literal"}]}""");
        assertEquals("12", llava.id());
        assertEquals(List.of(Video.of("a.mp4"), new Text("what?")), llava.messages().get(0).parts(), "LLaVA: stripped, human turns");
        assertEquals(Message.text(Role.ASSISTANT, "<video> stays literal"), llava.messages().get(1));

        var mixed = parse("""
            {"image": ["i.png"], "video": ["a.mp4"], "conversations": [{"from": "human", "value": "<image> and <video>"},
             {"from": "gpt", "value": "ok"}]}""");
        assertEquals(List.of(new Image("i.png"), new Text("and"), Video.of("a.mp4")), mixed.messages().get(0).parts());
    }

    @Test
    void placeholderAndListCountsMustAgreeNamingTheRecord() {
        assertEquals("the messages have 1 <video> placeholder(s) but the record lists 2 video(s) in 'videos'", refusal("""
            {"messages": [{"role": "user", "content": "<video>hi"}], "videos": ["a.mp4", "b.mp4"]}"""));
        assertEquals("the turns have 2 <video> placeholder(s) but the record lists 1 video(s) in 'videos'", refusal("""
            {"conversations": [{"from": "human", "value": "<video><video>"}], "videos": ["a.mp4"]}"""));
        assertEquals("the human turns have 1 <video> placeholder(s) but the record lists 0 video(s) (no 'video' or 'videos' field)",
                refusal("{\"conversations\": [{\"from\": \"human\", \"value\": \"<video>\"}]}"));
        assertEquals("the messages have 0 <image> placeholder(s) but the record lists 1 image(s) in 'images'", refusal("""
            {"messages": [{"role": "user", "content": "<video>hi"}], "videos": ["a.mp4"], "images": ["i.png"]}"""));
    }

    @Test
    void malformedVideoFieldsAreRefusedNamingThePath() {
        assertEquals("has 'image' and 'videos'; expected 'image' and 'video' (LLaVA) or 'images' and 'videos' (ShareGPT)", refusal("""
            {"image": "i.png", "videos": ["a.mp4"], "conversations": [{"from": "human", "value": "<image><video>"}]}"""));
        assertEquals("has both 'video' and 'videos'; expected one",
                refusal("{\"messages\": [{\"role\": \"user\", \"content\": \"<video>\"}], \"video\": \"a\", \"videos\": [\"a\"]}"));
        assertEquals("field 'videos[0]': expected a string or an array of frame paths, got number",
                refusal("{\"messages\": [{\"role\": \"user\", \"content\": \"<video>\"}], \"videos\": [3]}"));
        assertEquals("field 'videos[0]': empty frame list",
                refusal("{\"messages\": [{\"role\": \"user\", \"content\": \"<video>\"}], \"videos\": [[]]}"));
        String typed = "{\"messages\": [{\"role\": \"user\", \"content\": [ITEM]}]}";
        assertEquals("messages[0].content[0].fps: expected a number or a string (a per-item video option), got boolean",
                refusal(typed.replace("ITEM", "{\"type\": \"video\", \"video\": \"a.mp4\", \"fps\": true}")));
        assertEquals("messages[0].content[0].nframes: expected a number or a string (a per-item video option), got null",
                refusal(typed.replace("ITEM", "{\"type\": \"video\", \"video\": \"a.mp4\", \"nframes\": null}")));
        assertEquals("messages[0].content[0].nframes: 99999999999999999999 is out of range",
                refusal(typed.replace("ITEM", "{\"type\": \"video\", \"video\": \"a.mp4\", \"nframes\": 99999999999999999999}")));
        assertEquals("messages[0].content[0]: video item has no 'video', 'url' or 'path'",
                refusal(typed.replace("ITEM", "{\"type\": \"video\", \"fps\": 2}")));
        assertEquals("messages[0].content[0]: an item is an image or a video, not both",
                refusal(typed.replace("ITEM", "{\"video\": \"a.mp4\", \"image\": \"i.png\"}")));
        assertEquals("messages[0].content[0].video[1]: expected a string (a frame image), got number",
                refusal(typed.replace("ITEM", "{\"type\": \"video\", \"video\": [\"f0.jpg\", 1]}")));
        var many = new StringBuilder("{\"type\": \"video\", \"video\": \"a.mp4\"");
        for (int i = 0; i <= SampleParser.MAX_VIDEO_OPTIONS; i++) many.append(", \"k").append(i).append("\": ").append(i);
        assertEquals("messages[0].content[0]: more than " + SampleParser.MAX_VIDEO_OPTIONS + " per-item keys",
                refusal(typed.replace("ITEM", many + "}")));
        var frames = new StringBuilder("[");
        for (int i = 0; i <= SampleParser.MAX_VIDEO_FRAMES; i++) frames.append(i == 0 ? "" : ",").append("\"f\"");
        assertEquals("messages[0].content[0].video: " + (SampleParser.MAX_VIDEO_FRAMES + 1) + " frames, over the limit of "
                + SampleParser.MAX_VIDEO_FRAMES, refusal(typed.replace("ITEM", "{\"type\": \"video\", \"video\": " + frames + "]}")));
        assertEquals("messages[0].content[0]: a per-item key of 257 characters, over the limit of 256",
                refusal(typed.replace("ITEM", "{\"type\": \"video\", \"video\": \"a\", \"" + "k".repeat(257) + "\": 1}")));
    }

    @Test
    void typedContentTakesNoTopLevelListOrPlaceholders() {
        assertEquals("field 'videos' lists 1 video(s) but the record uses none: its content is typed (messages[0].content is an array), "
                + "where videos are content items", refusal("""
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "videos": ["a.mp4"]}"""));
        assertEquals("messages[1].content: <video> placeholder in string content, but messages[0].content is typed (an array); "
                + "a record uses typed video items or placeholders, not both", refusal("""
            {"messages": [{"role": "user", "content": [{"type": "video", "video": "a.mp4"}]},
                          {"role": "assistant", "content": "<video>"}]}"""));
        var literal = parse("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"<video> is text\"}]}]}");
        assertEquals(List.of(new Text("<video> is text")), literal.messages().get(0).parts());
    }

    @Test
    void audioIsStillRefusedWhenVideoIsRead() {
        assertEquals("messages[0].content: <audio> placeholder found; " + UnservedMedia.AUDIO.notSupported(), refusal("""
            {"messages": [{"role": "user", "content": "<video><audio>What?"}], "videos": ["4.mp4"], "audios": ["4.mp3"]}"""));
    }

    @Test
    void theVideoPartChecksWhatItCarries() {
        assertThrows(IllegalArgumentException.class, () -> new Video("a.mp4", List.of("f.jpg"), Map.of()));
        assertThrows(IllegalArgumentException.class, () -> new Video(null, List.of(), Map.of()));
        assertThrows(IllegalArgumentException.class, () -> new Video("a.mp4", List.of(), Map.of("fps", Double.NaN)));
        assertThrows(IllegalArgumentException.class, () -> new Video("a.mp4", List.of(), Map.of("fps", 2)), "Integer is not a carried type");
    }
}
