/* code_prompts.h: the code-completion prompts the speculation tests share
 * (test_spec_engine, test_seeded): repetitive enough that every proposer
 * drafts on the bundled pair. */
#ifndef SP_TEST_CODE_PROMPTS_H
#define SP_TEST_CODE_PROMPTS_H

static const char *PROMPTS[] = {
    "import os\nimport sys\n\n\ndef main(argv):\n    for name in argv[1:]:\n        if os.path.isdir(name):\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self.items.append(item)\n\n    def pop(self):\n",
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\ndef fact(n):\n",
    "    def __repr__(self):\n        return '%s(%r)' % (self.__class__.__name__, self.items)\n\n    def __len__(self):\n",
    "The cat sat on the mat. The cat sat on the mat. The cat",
    "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(i)\nfor i in range(10):\n",
    "x = [1, 2, 3]\ny = [1, 2, 3]\nz = [1, 2, 3]\nw = ",
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n",
};
#define NPR 8

#endif
