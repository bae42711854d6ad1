from text import slugify
assert slugify("Hello World") == "hello-world"
assert slugify("  Rust & Python!  ") == "rust-python"
assert slugify("a--b__c") == "a-b-c"
print("ok")
