#include "run.h"

int main() {
    ConvNet model(3);
    run(model, 2);
}
