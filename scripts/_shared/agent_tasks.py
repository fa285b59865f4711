"""The agent loop's sessions: each a coding task, then tool turns that ask for the whole file again.

``agent_loop.py`` sends them to servers over HTTP; ``ceilings/loop_passes.py`` runs them in process on
serve's scheduler. ``TASK_SETS`` names the two sets: ``tuning`` (the tasks specdec was tuned on)
and ``holdout`` (other languages, other files, other edits, never used to tune specdec).
"""

TASKS = [
    "Write a Python module `inventory.py` with a class `Inventory` that keeps items by SKU (name, quantity, "
    "unit price), with methods add_item, remove_item, restock, total_value and low_stock(threshold), and a "
    "small `if __name__ == \"__main__\":` demo. About 45 lines, type hints, docstrings. Output only the file.",
    "Write a Python module `textstats.py` with functions word_count, sentence_count, average_word_length, "
    "top_words(n) and a `Report` dataclass that collects them for a text, plus a `main()` that reads a file "
    "named on the command line and prints the report. About 45 lines, type hints. Output only the file.",
]
TOOL_TURNS = [
    "Tool output (pytest): 1 failed: the function that removes or counts must raise ValueError on a negative "
    "or empty input, and it does not. Fix it and output the whole file again.",
    "Tool output (review): rename the main class or dataclass to carry a `Stock` or `Text` prefix everywhere, "
    "and add one more method of your choice. Output the whole file again.",
]
TASKS += [  # sessions 3 and 4
    "Write a Python module `todo_store.py` with a `Todo` dataclass (id, title, done, tags) and a `TodoStore` "
    "class that keeps todos in a dict and saves/loads them as JSON, with add, complete, remove, by_tag and "
    "pending methods. About 40 lines, type hints. Output only the file.",
    "Write a Python module `rate_limiter.py` with a token-bucket `RateLimiter` class (capacity, refill rate, "
    "allow(), wait_time()) and a `limited` decorator that uses it, plus a short demo. About 40 lines, type "
    "hints, docstrings. Output only the file.",
]
# the held-out set: never used to tune specdec (other languages, other files, other edits)
HOLDOUT_TASKS = [
    "Write a JavaScript module `cart.js` exporting a class `Cart` with addItem(sku, price, qty), removeItem(sku), "
    "applyCoupon(code) for three fixed coupons, subtotal(), and total() with 8% tax, plus JSDoc comments. "
    "Output only the file.",
    "Write a SQL file `library.sql`: CREATE TABLE statements for authors, books and loans with keys and "
    "constraints, then four queries: overdue loans, books per author, the five most borrowed books, and "
    "members with more than three open loans. Output only the file.",
    "Write a Go file `queue.go` with a generic thread-safe FIFO `Queue[T any]` (Push, Pop, Peek, Len) guarded "
    "by a sync.Mutex, Pop and Peek returning (T, bool), and an `ExampleQueue` function. Output only the file.",
    "Write a Python module `csv_report.py` that reads a CSV of sales (date, region, product, amount) with the "
    "csv module, totals amounts per region and per month, and prints both as aligned text tables; a `main()` "
    "takes the path from argv. Output only the file.",
]
HOLDOUT_TOOL_TURNS = [
    "Tool output (lint): public functions accept invalid arguments silently; each must reject them with an "
    "error the language's way. Fix it and output the whole file again.",
    "Tool output (review): add a one-line comment above each function or statement saying what it does, and "
    "rename one identifier to a clearer name everywhere. Output the whole file again.",
]
TASK_SETS = {"tuning": (TASKS, TOOL_TURNS), "holdout": (HOLDOUT_TASKS, HOLDOUT_TOOL_TURNS)}
