// measure/rouge.h against hand-worked examples: the tokenizer (rouge-score's default: lower case, a-z0-9
// runs, stemming of tokens longer than 3), the Porter stemmer against known stems (the paper's
// examples and NLTK's extensions; NLTK 3.8's PorterStemmer gives exactly these), ROUGE-1/2
// with clipped counts and ROUGE-L through the longest common subsequence.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "measure/rouge.h"

namespace {

using Tokens = std::vector<std::string>;

TEST(RougeTokenize, LowerCasesAndSplitsOnEverythingButLettersAndDigits) {
    EXPECT_EQ(rouge::tokenize("The Cat-sat; ON the mat!!", false), (Tokens{"the", "cat", "sat", "on", "the", "mat"}));
    EXPECT_EQ(rouge::tokenize("  it's 42nd\tst.\n", false), (Tokens{"it", "s", "42nd", "st"}));
    EXPECT_EQ(rouge::tokenize("", false), Tokens{});
    EXPECT_EQ(rouge::tokenize("--- ... !!", false), Tokens{});
    EXPECT_EQ(rouge::tokenize("under_score", false), (Tokens{"under", "score"}));
}

TEST(RougeTokenize, NonAsciiIsASeparatorExceptTheTwoLettersPythonLowersToAscii) {
    EXPECT_EQ(rouge::tokenize("naïve café", false), (Tokens{"na", "ve", "caf"}));
    // "İ".lower() == "i" + U+0307 (a combining dot, not a-z0-9); the Kelvin sign lowers to "k".
    EXPECT_EQ(rouge::tokenize("\xC4\xB0zmir", false), (Tokens{"i", "zmir"}));
    EXPECT_EQ(rouge::tokenize("300\xE2\x84\xAA", false), Tokens{"300k"});
    // Bytes that are not valid UTF-8 (a token cut in the middle of a character) separate too.
    EXPECT_EQ(rouge::tokenize("ab\xE2\x84x", false), (Tokens{"ab", "x"}));
}

TEST(RougeTokenize, StemsOnlyTokensLongerThanThreeCharacters) {
    EXPECT_EQ(rouge::tokenize("Cats were running; the dogs ran", true),
              (Tokens{"cat", "were", "run", "the", "dog", "ran"}));
    EXPECT_EQ(rouge::tokenize("ties ties", true), (Tokens{"tie", "tie"}));  // 4 letters: stemmed
    EXPECT_EQ(rouge::tokenize("was has", true), (Tokens{"was", "has"}));    // 3 letters: kept
}

TEST(PorterStemmer, KnownStems) {
    const std::vector<std::pair<const char*, const char*>> known = {
        {"caresses", "caress"}, {"ponies", "poni"}, {"ties", "tie"}, {"dies", "die"}, {"flies", "fli"},
        {"skies", "sky"}, {"dying", "die"}, {"news", "news"}, {"innings", "inning"}, {"proceed", "proceed"},
        {"agreed", "agre"}, {"feed", "feed"}, {"plastered", "plaster"}, {"bled", "bled"}, {"motoring", "motor"},
        {"sing", "sing"}, {"conflated", "conflat"}, {"troubled", "troubl"}, {"sized", "size"},
        {"hopping", "hop"}, {"tanned", "tan"}, {"falling", "fall"}, {"hissing", "hiss"}, {"fizzed", "fizz"},
        {"failing", "fail"}, {"filing", "file"}, {"happy", "happi"}, {"enjoy", "enjoy"}, {"spied", "spi"},
        {"died", "die"}, {"relational", "relat"}, {"conditional", "condit"}, {"rational", "ration"},
        {"valenci", "valenc"}, {"hesitanci", "hesit"}, {"digitizer", "digit"}, {"conformabli", "conform"},
        {"radicalli", "radic"}, {"differentli", "differ"}, {"vileli", "vile"}, {"analogousli", "analog"},
        {"vietnamization", "vietnam"}, {"predication", "predic"}, {"operator", "oper"}, {"feudalism", "feudal"},
        {"decisiveness", "decis"}, {"hopefulness", "hope"}, {"callousness", "callous"}, {"formaliti", "formal"},
        {"sensitiviti", "sensit"}, {"sensibiliti", "sensibl"}, {"fully", "fulli"}, {"geology", "geolog"},
        {"triplicate", "triplic"}, {"formative", "form"}, {"formalize", "formal"}, {"electriciti", "electr"},
        {"electrical", "electr"}, {"hopeful", "hope"}, {"goodness", "good"}, {"revival", "reviv"},
        {"allowance", "allow"}, {"inference", "infer"}, {"airliner", "airlin"}, {"gyroscopic", "gyroscop"},
        {"adjustable", "adjust"}, {"defensible", "defens"}, {"irritant", "irrit"}, {"replacement", "replac"},
        {"adjustment", "adjust"}, {"dependent", "depend"}, {"adoption", "adopt"}, {"communism", "commun"},
        {"activate", "activ"}, {"angulariti", "angular"}, {"homologous", "homolog"}, {"effective", "effect"},
        {"bowdlerize", "bowdler"}, {"probate", "probat"}, {"rate", "rate"}, {"cease", "ceas"},
        {"controll", "control"}, {"roll", "roll"}, {"generalization", "gener"}, {"whale", "whale"},
        {"whales", "whale"}, {"harpooneer", "harpoon"}, {"leviathan", "leviathan"}, {"ishmael", "ishmael"},
        {"queequeg", "queequeg"}, {"ahab", "ahab"},
        // short words are left alone; digits count as consonants
        {"as", "as"}, {"is", "is"}, {"1990s", "1990"}, {"42nd", "42nd"},
    };
    rouge::PorterStemmer stemmer;
    for (const auto& [word, stem] : known) EXPECT_EQ(stemmer.stem(word), stem) << word;
}

void expect_score(const rouge::Score& s, double p, double r, double f, const char* what) {
    EXPECT_NEAR(s.precision, p, 1e-12) << what;
    EXPECT_NEAR(s.recall, r, 1e-12) << what;
    EXPECT_NEAR(s.f1, f, 1e-12) << what;
}

TEST(Rouge, HandWorkedSentence) {
    // ref: the cat sat on the mat (6 tokens, 5 bigrams); pred: the cat on the mat (5, 4).
    const rouge::Scores s = rouge::score("The cat sat on the mat.", "the cat on the mat", false);
    // unigram overlap: the×2, cat, on, mat = 5 → P = 5/5, R = 5/6, F = 10/11
    expect_score(s.rouge1, 1.0, 5.0 / 6, 10.0 / 11, "rouge1");
    // bigram overlap: "the cat", "on the", "the mat" = 3 → P = 3/4, R = 3/5, F = 2/3
    expect_score(s.rouge2, 0.75, 0.6, 2.0 / 3, "rouge2");
    // LCS "the cat on the mat" = 5
    expect_score(s.rougeL, 1.0, 5.0 / 6, 10.0 / 11, "rougeL");
}

TEST(Rouge, LcsIsInOrderNotBagOfWords) {
    // Same words reversed: every unigram matches, no bigram does, the LCS is one word.
    const rouge::Scores s = rouge::score("a b c d e", "e d c b a", false);
    expect_score(s.rouge1, 1, 1, 1, "rouge1");
    expect_score(s.rouge2, 0, 0, 0, "rouge2");
    expect_score(s.rougeL, 0.2, 0.2, 0.2, "rougeL");
    // Lin (2004)'s example: LCS "the gunman" = 2 of 4; one shared bigram of 3.
    const rouge::Scores g = rouge::score("police killed the gunman", "the gunman killed police", false);
    expect_score(g.rougeL, 0.5, 0.5, 0.5, "gunman rougeL");
    expect_score(g.rouge2, 1.0 / 3, 1.0 / 3, 1.0 / 3, "gunman rouge2");
}

TEST(Rouge, LcsLengthOnSequences) {
    auto t = [](const char* s) { return rouge::tokenize(s, false); };
    EXPECT_EQ(rouge::lcs_length(t("a b c b d a b"), t("b d c a b a")), 4u);  // e.g. "b c b a" / "b d a b"
    EXPECT_EQ(rouge::lcs_length(t("x y z"), t("a b c")), 0u);
    EXPECT_EQ(rouge::lcs_length(t(""), t("a b")), 0u);
    EXPECT_EQ(rouge::lcs_length(t("a a a a"), t("a a")), 2u);
    EXPECT_EQ(rouge::lcs_length(t("w1 w2 w3 w4 w5"), t("w1 w3 w5")), 3u);
}

TEST(Rouge, CountsAreClipped) {
    // "the" three times in the prediction matches the reference's single "the" once.
    const rouge::Scores s = rouge::score("the cat", "the the the", false);
    expect_score(s.rouge1, 1.0 / 3, 0.5, 0.4, "rouge1");
    expect_score(s.rougeL, 1.0 / 3, 0.5, 0.4, "rougeL");
}

TEST(Rouge, EmptyTextsScoreZero) {
    for (auto [ref, pred] : {std::pair{"", "a b"}, std::pair{"a b", ""}, std::pair{"", ""}, std::pair{"!!", "?"}}) {
        const rouge::Scores s = rouge::score(ref, pred, false);
        expect_score(s.rouge1, 0, 0, 0, "rouge1");
        expect_score(s.rouge2, 0, 0, 0, "rouge2");
        expect_score(s.rougeL, 0, 0, 0, "rougeL");
    }
    // One token each: no bigrams anywhere, so ROUGE-2 is 0 even for identical texts.
    const rouge::Scores one = rouge::score("whale", "whale", false);
    expect_score(one.rouge1, 1, 1, 1, "rouge1");
    expect_score(one.rouge2, 0, 0, 0, "rouge2");
}

TEST(Rouge, StemmingMatchesInflections) {
    // Stemmed: ref the/cat/were/run, pred a/cat/run → 2 shared → P = 2/3, R = 2/4, F = 4/7.
    const rouge::Scores with = rouge::score("The cats were running", "a cat runs", true);
    expect_score(with.rouge1, 2.0 / 3, 0.5, 4.0 / 7, "stemmed rouge1");
    expect_score(with.rougeL, 2.0 / 3, 0.5, 4.0 / 7, "stemmed rougeL");
    const rouge::Scores without = rouge::score("The cats were running", "a cat runs", false);
    expect_score(without.rouge1, 0, 0, 0, "unstemmed rouge1");
}

}  // namespace
