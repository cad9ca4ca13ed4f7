package tokenizer

// Parse builds a tokenizer from the bytes of a tokenizer.json and, when
// configJSON is not nil, of a tokenizer_config.json; name stands for the
// source in errors. The GGUF loader uses it with files it builds from a
// GGUF's tokenizer metadata.
func Parse(tokenizerJSON, configJSON []byte, name string) (*Tokenizer, error) {
	t, err := parse(tokenizerJSON, name)
	if err != nil {
		return nil, err
	}
	if configJSON != nil {
		if err := t.parseConfig(configJSON, name+" (tokenizer_config)"); err != nil {
			return nil, err
		}
	}
	return t, nil
}
