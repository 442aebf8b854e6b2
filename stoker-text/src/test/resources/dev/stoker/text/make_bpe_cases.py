"""Regenerates bpe_cases.jsonl: random strings and their ids from the pure-Python reference BPE.

Run from the repository root with the shared reference beside it:
    /usr/bin/python3 stoker-text/src/test/resources/dev/stoker/text/make_bpe_cases.py ../shared
"""
import json, os, random, sys

sys.path.insert(0, os.path.join(sys.argv[1], "reference"))
import ref_qwenvl  # noqa: E402

POOLS = {
    "ascii": list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    "digits": list("0123456789"),
    "punct": list(".,;:!?'\"()[]{}<>-_/\\|@#$%^&*+=~`"),
    "space": [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\n\n", "\u00a0", "\u3000", "\u2009", "\u000b", "\u0085"],
    "cjk": list("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坐集编宝谈府拉黑且随格尽剑讲布杀微怕母调局根曾准团段终乐切级克精哪官示冷域读"),
    "accents": list("éèêëàâäôöûüçñåøæßÿ") + ["e\u0301", "a\u0308", "o\u0302", "\u212b", "\u1e9b\u0323"],
    "emoji": ["😀", "👍", "🎉", "❤️", "👨‍👩‍👧", "🇩🇪", "🤖", "✨", "🧑🏽‍💻"],
    "contr": ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'ſ", "’s"],
    "special": ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<think>", "<|endoftext|>", "<|im_start", "<image>"],
    "other": list("αβγδεζηθλμπσωАБВГДежзийклмнопрстуфхцчшщыэюяשלוםمرحبا안녕하세요こんにちはカタカナ") + ["\u200b", "\u00ad", "\ufeff", "½", "²", "Ⅻ", "٣", "١٢"],
}
WORDS = ["the", "model", "image", "Hello", "world", "don", "can", "It", "you", "tokenizer", "Qwen", "assistant",
         "user", "system", "picture", "mountain", "2024", "3.14159", "1,000,000", "GPT-4", "e.g.", "http://x.io/a?b=1"]


def random_string(rng):
    parts = []
    for _ in range(rng.randint(1, 25)):
        r = rng.random()
        if r < 0.3:
            parts.append(rng.choice(WORDS))
        elif r < 0.45:
            parts.append(" ")
        else:
            pool = POOLS[rng.choice(list(POOLS))]
            parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
    return "".join(parts)


def main():
    rng = random.Random(20261202)
    tok = ref_qwenvl.QwenTokenizer()
    fixed = ["Hello world", " Hello world", "don't you're I'LL it'S", "你好，世界！今天天气很好。", "    leading and trailing   ",
             "a\n\n\nb\r\n\r\nc\t\td", "12345 67.89", "caf\u0065\u0301 vs caf\u00e9", "👨‍👩‍👧 family 🇩🇪", "", "\n", " ",
             "<|im_start|>user\nHi<|im_end|>\n", "ﬁ ﬀ ™ …"]
    out_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bpe_cases.jsonl")
    with open(out_path, "w", encoding="utf-8") as f:
        for s in fixed + [random_string(rng) for _ in range(300)]:
            f.write(json.dumps({"text": s, "ids": tok.encode(s)}, ensure_ascii=True) + "\n")


main()
